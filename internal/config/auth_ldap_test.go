package config

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

const ldapOK = "[auth.ldap]\nurl = \"ldaps://dc.example.com:636\"\nbase_dn = \"dc=example,dc=com\"\nbind_dn = \"cn=svc,dc=example,dc=com\"\n"

// A good [auth.ldap] and [[auth.groups]] load with the defaults filled in.
func TestLDAPConfigLoads(t *testing.T) {
	t.Parallel()
	c, _, err := loadO(t, ldapOK+"\n[[auth.groups]]\ngroup = \"cn=ml,dc=example,dc=com\"\nteam = \"default\"\nrole = \"lead\"\nscopes = [\"admin.audit\"]\n",
		env("SIMPLETUNER_LDAP_BIND_PASSWORD", "s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	d := c.Auth.LDAP
	if !d.Enabled() || d.UserFilter != "(uid={username})" || d.Timeout.Duration != 5*time.Second || d.MaxConcurrent != 8 {
		t.Errorf("defaults: %+v", d)
	}
	if d.BindPassword.Value() != "s3cret" {
		t.Errorf("bind password from the environment not used")
	}
	if len(c.Auth.Groups) != 1 || c.Auth.Groups[0].Role != "lead" {
		t.Errorf("groups: %+v", c.Auth.Groups)
	}
	if strings.Contains(c.Redacted(), "s3cret") {
		t.Errorf("the bind password is printed:\n%s", c.Redacted())
	}
}

// The bind password comes from bind_password_file, else the systemd
// credential ldap-bind-password.
func TestLDAPBindPasswordSources(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "pw")
	if err := os.WriteFile(file, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, _, err := loadO(t, ldapOK+"bind_password_file = \""+file+"\"\n", env())
	if err != nil || c.Auth.LDAP.BindPassword.Value() != "from-file" {
		t.Fatalf("file: %v %q", err, c.Auth.LDAP.BindPassword.Value())
	}
	creds := t.TempDir()
	if err := os.WriteFile(filepath.Join(creds, "ldap-bind-password"), []byte("from-cred"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, _, err = loadO(t, ldapOK, env("CREDENTIALS_DIRECTORY", creds))
	if err != nil || c.Auth.LDAP.BindPassword.Value() != "from-cred" {
		t.Fatalf("credential: %v %q", err, c.Auth.LDAP.BindPassword.Value())
	}
}

// Each mistake is reported with the file and line of the key, and names it.
func TestLDAPConfigErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ toml, want string }{
		{"[auth.ldap]\nurl = \"ldap://dc.example.com\"\nbase_dn = \"dc=x\"\n",
			"o.toml:2: key auth.ldap.url: \"ldap://dc.example.com\" is plain LDAP, which would send passwords in clear"},
		{"[auth.ldap]\nurl = \"ldaps://dc\"\nstart_tls = true\nbase_dn = \"dc=x\"\n", "o.toml:3: key auth.ldap.start_tls: is for ldap:// URLs"},
		{"[auth.ldap]\nurl = \"http://dc\"\nbase_dn = \"dc=x\"\n", "o.toml:2: key auth.ldap.url: \"http://dc\": want ldaps://"},
		{"[auth.ldap]\nurl = \"ldaps://dc/dc=x\"\nbase_dn = \"dc=x\"\n", "o.toml:2: key auth.ldap.url: \"ldaps://dc/dc=x\": give only scheme, host and port"},
		{"[auth.ldap]\nurl = \"ldaps://dc\"\n", "key auth.ldap.base_dn: must be set with auth.ldap.url"},
		{ldapOK, "o.toml:4: key auth.ldap.bind_dn: is set but no bind password was given"},
		{"[auth.ldap]\nbase_dn = \"not a dn\"\n", "o.toml:2: key auth.ldap.base_dn: \"not a dn\" is not a DN"},
		{"[auth.ldap]\nuser_filter = \"(uid=alice)\"\n", "o.toml:2: key auth.ldap.user_filter: \"(uid=alice)\" must contain {username}"},
		{"[auth.ldap]\nuser_filter = \"(uid={username}\"\n", "o.toml:2: key auth.ldap.user_filter: \"(uid={username}\" is not an LDAP filter"},
		{"[auth.ldap]\ngroup_filter = \"(member=x)\"\n", "o.toml:2: key auth.ldap.group_filter: \"(member=x)\" must contain {dn}"},
		{"[auth.ldap]\nmax_concurrent = 0\n", "o.toml:2: key auth.ldap.max_concurrent: must be from 1 to 1024, got 0"},
		{"[auth.ldap]\ntimeout = \"0s\"\n", "o.toml:2: key auth.ldap.timeout:"},
		{"[auth.ldap]\nbind_password = \"x\"\n", "o.toml:2: key auth.ldap.bind_password: is set but auth.ldap.bind_dn is empty"},
		{"[auth.ldap]\nca_file = \"/nonexistent/ca.pem\"\n", "o.toml:2: key auth.ldap.ca_file:"},
		{"[auth.ldap]\nurll = \"ldaps://dc\"\n", "o.toml:2: key auth.ldap.urll: unknown key (did you mean auth.ldap.url?)"},
		{"[[auth.groups]]\ngroup = \"g\"\nteam = \"default\"\nrole = \"owner\"\n",
			"o.toml:1: key auth.groups: entry 1: role: \"owner\" is not one of viewer, member, lead, admin"},
		{"[[auth.groups]]\ngroup = \"g\"\nrole = \"member\"\n", "o.toml:1: key auth.groups: entry 1: team: must be set for role \"member\""},
		{"[[auth.groups]]\ngroup = \"g\"\nrole = \"admin\"\n\n[[auth.groups]]\ngroup = \"\"\nteam = \"nope\"\nrole = \"viewer\"\n",
			"o.toml:5: key auth.groups: entry 2: group: must not be empty"},
		{"[[auth.groups]]\ngroup = \"g\"\nteam = \"nope\"\nrole = \"viewer\"\n", "o.toml:1: key auth.groups: entry 1: team: unknown team \"nope\""},
		{"[[auth.groups]]\ngroup = \"g\"\nteam = \"default\"\nrole = \"viewer\"\nscopes = [\"queue.everything\"]\n",
			"o.toml:1: key auth.groups: entry 1: scopes: unknown scope \"queue.everything\""},
	} {
		_, _, err := loadO(t, tc.toml, env())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q:\n got  %v\n want %q", tc.toml, err, tc.want)
		}
	}
}

// The TOML examples in docs/auth.md load (with their files made up here and
// the team they name declared).
func TestAuthDocExamplesLoad(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../docs/auth.md")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ca, pw := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "pw")
	for _, f := range []string{ca, pw} {
		if err := os.WriteFile(f, []byte("x\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	blocks := strings.Split(string(b), "```toml\n")[1:]
	if len(blocks) < 2 {
		t.Fatalf("found %d TOML examples", len(blocks))
	}
	for i, bl := range blocks {
		text, _, _ := strings.Cut(bl, "```")
		files := map[string]string{"ca_file": ca, "bind_password_file": pw, "client_secret_file": pw}
		for key, file := range files {
			re := regexp.MustCompile("(?m)^" + key + ` = ".*"$`)
			text = re.ReplaceAllString(text, key+` = "`+file+`"`)
		}
		if _, _, err := loadO(t, "[[teams]]\nname = \"ml\"\nshare = 1\n\n"+text, env()); err != nil {
			t.Errorf("example %d: %v\n%s", i+1, err, text)
		}
	}
}

// A reload that changes the bind password reports the key, never the value.
func TestLDAPChangesHidePassword(t *testing.T) {
	t.Parallel()
	a, b := DefaultOrchestrator(), DefaultOrchestrator()
	a.Auth.LDAP.BindPassword, b.Auth.LDAP.BindPassword = "old-secret", "new-secret"
	b.Auth.Groups = []GroupMapping{{Group: "g", Team: "default", Role: "viewer"}}
	var keys []string
	for _, c := range Changes(a, b) {
		keys = append(keys, c.Key)
		if strings.Contains(c.Old+c.New, "secret") {
			t.Errorf("change %s shows the password: %q → %q", c.Key, c.Old, c.New)
		}
	}
	if !slices.Contains(keys, "auth.ldap.bind_password") || !slices.Contains(keys, "auth.groups") {
		t.Errorf("changes: %q", keys)
	}
}
