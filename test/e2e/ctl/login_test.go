package ctle2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/ctl/ctlconf"
	"github.com/simpletuner/simpletuner-orchestration/internal/oidctest"
	"github.com/simpletuner/simpletuner-orchestration/internal/slapdtest"
	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
	. "github.com/simpletuner/simpletuner-orchestration/test/e2e/e2etest"
)

// oidcTOML configures single sign-on with the test provider op, its
// groups mapped to roles, and the command line's public client.
func oidcTOML(t *testing.T, op *oidctest.Server) string {
	secret := filepath.Join(t.TempDir(), "oidc-client-secret")
	if err := os.WriteFile(secret, []byte(oidctest.ClientSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf(`
[[teams]]
name = "nlp"
share = 1

[[auth.groups]]
group = "ml-team"
team = "nlp"
role = "member"

[auth.oidc]
issuer = %q
client_id = %q
client_secret_file = %q
redirect_url = %q
cli_client_id = %q
`, op.URL, oidctest.ClientID, secret, oidctest.RedirectURI, oidctest.CLIClientID)
}

var userCodeRE = regexp.MustCompile(`enter the code (\S+)`)

// simpletunerctl login by the device grant: the test confirms the code on
// the provider's page as the person would; whoami then shows the person,
// their role in their team and the login's expiry; logout revokes the
// token and forgets it.
func TestLoginDeviceFlow(t *testing.T) {
	t.Parallel()
	op := oidctest.Start(t)
	o := StartOrchestratorWith(t, OrchOptions{ExtraTOML: oidcTOML(t, op)})
	c := newCtl(t, map[string]string{"SIMPLETUNER_URL": o.URL})

	stderr := deviceLogin(t, c, op)
	mustContain(t, "login", stderr, "To sign in, open "+op.URL+"/device", "Logged in to "+o.URL+" as Alice Liddell until")

	path := filepath.Join(c.env["HOME"], ".config", "simpletuner", "login.toml")
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("login.toml: %v %v", fi, err)
	}
	logins, err := ctlconf.LoadLogins(path)
	if err != nil || len(logins.Logins) != 1 || logins.Logins[0].URL != o.URL || logins.Logins[0].Provider != "oidc" {
		t.Fatalf("login.toml: %+v %v", logins, err)
	}
	c.secrets = append(c.secrets, logins.Logins[0].Token)

	who := c.ok("whoami").Stdout
	mustContain(t, "whoami", who, "Alice Liddell", "alice@example.com", "nlp:member", "login (oidc)",
		logins.Logins[0].ExpiresAt.UTC().Format(time.RFC3339))

	// An explicit token wins over the login.
	admin := overTCP(t, o)
	mustContain(t, "whoami with --token-file", admin.ok("whoami").Stdout, "--token-file")

	mustContain(t, "logout", c.ok("logout").Stderr, "Logged out of "+o.URL)
	c.env["SIMPLETUNER_ADMIN_TOKEN"] = logins.Logins[0].Token
	c.want(4, "whoami") // revoked at the orchestrator
	delete(c.env, "SIMPLETUNER_ADMIN_TOKEN")
	mustContain(t, "logout again", c.ok("logout").Stderr, "Not logged in to "+o.URL)
	docsShowOnly(t, "simpletunerctl login", "simpletunerctl whoami", "simpletunerctl logout",
		"simpletunerctl login --ldap --username alice --password-stdin")
}

// docsShowOnly fails unless every simpletunerctl login, logout and whoami
// line docs/auth.md and README.md show (less the README's comments) is one
// of ran, the lines these tests run as printed.
func docsShowOnly(t *testing.T, ran ...string) {
	t.Helper()
	shownIn := regexp.MustCompile(`(?m)^\s*(simpletunerctl (login|logout|whoami)\b[^#\n]*)`)
	for _, file := range []string{"docs/auth.md", "README.md"} {
		doc, err := os.ReadFile(filepath.Join("../../..", file))
		if err != nil {
			t.Fatal(err)
		}
		shown := shownIn.FindAllStringSubmatch(string(doc), -1)
		if len(shown) < 3 {
			t.Fatalf("%s shows %d login commands; is the extraction broken?", file, len(shown))
		}
		for _, m := range shown {
			if line := strings.TrimSpace(m[1]); !slices.Contains(ran, line) {
				t.Errorf("%s shows %q, which the login tests do not run", file, line)
			}
		}
	}
}

// deviceLogin runs simpletunerctl login by the device grant, confirming
// the code it prints at the provider as alice, and returns what it wrote
// on standard error; a login that fails fails the test.
func deviceLogin(t *testing.T, c *ctl, op *oidctest.Server) string {
	t.Helper()
	login := c.start("login")
	code := printed(t, login, userCodeRE, "the user code")
	if err := op.ApproveDevice(t.Context(), code, "alice", "alice-password"); err != nil {
		t.Fatal(err)
	}
	if rc := login.wait(t, time.Minute); rc != 0 {
		_, stderr := login.output()
		t.Fatalf("login exited %d:\n%s", rc, stderr)
	}
	_, stderr := login.output()
	return stderr
}

// printed waits for a running login to print what re's first group
// matches on standard error (what), and returns it; a login that ends
// without printing it fails the test.
func printed(t *testing.T, login *background, re *regexp.Regexp, what string) string {
	t.Helper()
	var got string
	testutil.Eventually(t, time.Minute, what+" on standard error", func() bool {
		_, stderr := login.output()
		if m := re.FindStringSubmatch(stderr); m != nil {
			got = m[1]
		}
		return got != "" || isDone(login)
	})
	if got == "" {
		_, stderr := login.output()
		t.Fatalf("login printed no %s:\n%s", what, stderr)
	}
	return got
}

func isDone(b *background) bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

// simpletunerctl login --ldap with the password on standard input, against
// a real slapd; with a login that lasts a second, the next command says the
// login expired (exit 4), and the orchestrator refuses the token itself
// with token_expired.
func TestLoginLDAPExpires(t *testing.T) {
	t.Parallel()
	s := slapdtest.Start(t)
	alice := s.AddUser(t, "alice", "wonder land", "Alice Liddell", "alice@example.test")
	group := s.AddGroup(t, "trainers", alice)
	bindPassword := filepath.Join(t.TempDir(), "bind-password")
	if err := os.WriteFile(bindPassword, []byte(s.BindPassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := StartOrchestratorWith(t, OrchOptions{ExtraTOML: fmt.Sprintf(`
[[teams]]
name = "nlp"
share = 1

[[auth.groups]]
group = %q
team = "nlp"
role = "lead"

[auth]
login_token_ttl = "1s"

[auth.ldap]
url = %q
ca_file = %q
bind_dn = %q
bind_password_file = %q
base_dn = %q
`, group, s.URL, s.CAFile, s.BindDN, bindPassword, s.BaseDN)})
	c := newCtl(t, map[string]string{"SIMPLETUNER_URL": o.URL})
	c.secrets = append(c.secrets, "wonder land")

	bad := c.runStdin("wrong\n", "login", "--ldap", "--username", "alice", "--password-stdin")
	if bad.Code != 4 || !strings.Contains(bad.Stderr, "invalid user name or password") {
		t.Fatalf("wrong password: %s", bad)
	}
	c.want(2, "login", "--ldap", "--username", "alice") // no terminal, no --password-stdin

	r := c.runStdin("wonder land\n", "login", "--ldap", "--username", "alice", "--password-stdin")
	if r.Code != 0 || !strings.Contains(r.Stderr, "Logged in to "+o.URL+" as Alice Liddell") {
		t.Fatalf("login: %s", r)
	}
	logins, err := ctlconf.LoadLogins(filepath.Join(c.env["HOME"], ".config", "simpletuner", "login.toml"))
	if err != nil || len(logins.Logins) != 1 {
		t.Fatalf("login.toml: %+v %v", logins, err)
	}
	e := logins.Logins[0]
	c.secrets = append(c.secrets, e.Token)

	// A login is renewed within a minute of its end; without a refresh
	// token or a terminal it is used until it expires, and then the
	// command stops and says so.
	var expired result
	testutil.Eventually(t, time.Minute, "the login to expire", func() bool {
		expired = c.run("whoami")
		return expired.Code != 0 && strings.Contains(expired.Stderr, "your login expired")
	})
	if expired.Code != 4 {
		t.Fatalf("whoami with an expired login: %s", expired)
	}
	mustContain(t, "expired login", expired.Stderr, "your login expired at "+e.ExpiresAt.UTC().Format(time.RFC3339)+"; run simpletunerctl login")

	// The orchestrator itself refuses the token once its second is over.
	c.env["SIMPLETUNER_ADMIN_TOKEN"] = e.Token
	var last result
	testutil.Eventually(t, time.Minute, "the orchestrator refusing the expired token", func() bool {
		last = c.run("whoami")
		return last.Code == 4
	})
	mustContain(t, "token_expired", last.Stderr, "this token expired at", "run simpletunerctl login to get a new one")
}

var authURLRE = regexp.MustCompile(`To sign in, open (http\S+)`)

// simpletunerctl login --loopback: the provider sends the browser back to
// a listener of simpletunerctl on 127.0.0.1 (code with PKCE); the test
// plays the browser.
func TestLoginLoopback(t *testing.T) {
	t.Parallel()
	op := oidctest.Start(t)
	o := StartOrchestratorWith(t, OrchOptions{ExtraTOML: oidcTOML(t, op)})
	c := newCtl(t, map[string]string{"SIMPLETUNER_URL": o.URL})

	login := c.start("login", "--loopback", "--no-browser")
	authURL := printed(t, login, authURLRE, "the sign-in address")
	back, err := op.SignIn(t.Context(), authURL, "alice", "alice-password")
	if err != nil {
		t.Fatal(err)
	}
	if back.Hostname() != "127.0.0.1" || back.Path != "/callback" || back.Query().Get("code") == "" {
		t.Fatalf("sent back to %s", back)
	}
	resp, err := http.Get(back.String()) // the browser arriving back
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if rc := login.wait(t, time.Minute); rc != 0 {
		_, stderr := login.output()
		t.Fatalf("login exited %d:\n%s", rc, stderr)
	}
	mustContain(t, "whoami", c.ok("whoami").Stdout, "Alice Liddell", "nlp:member", "login (oidc)")
}

// A login that runs out is renewed with the provider's refresh token: a
// new ID token, exchanged again, without asking the person.
func TestLoginRefresh(t *testing.T) {
	t.Parallel()
	op := oidctest.Start(t, oidctest.Options{Clients: []oidctest.Client{
		{ID: oidctest.ClientID, Secret: oidctest.ClientSecret, RedirectURIs: []string{oidctest.RedirectURI}},
		{ID: oidctest.CLIClientID, Public: true, Device: true, Refresh: true, RedirectURIs: []string{"http://127.0.0.1/callback"}},
	}})
	o := StartOrchestratorWith(t, OrchOptions{ExtraTOML: "[auth]\nlogin_token_ttl = \"1s\"\n" + oidcTOML(t, op)})
	c := newCtl(t, map[string]string{"SIMPLETUNER_URL": o.URL})

	deviceLogin(t, c, op)
	path := filepath.Join(c.env["HOME"], ".config", "simpletuner", "login.toml")
	first, err := ctlconf.LoadLogins(path)
	if err != nil || len(first.Logins) != 1 || first.Logins[0].RefreshToken == "" {
		t.Fatalf("login.toml after login: %+v %v", first, err)
	}
	c.secrets = append(c.secrets, first.Logins[0].Token, first.Logins[0].RefreshToken)

	// The login lasts a second, well within the minute before its end at
	// which it is renewed: whoami renews it first.
	r := c.ok("whoami")
	mustContain(t, "whoami after renewal", r.Stdout, "Alice Liddell", "nlp:member")
	renewed, err := ctlconf.LoadLogins(path)
	if err != nil || len(renewed.Logins) != 1 || renewed.Logins[0].Token == first.Logins[0].Token ||
		renewed.Logins[0].RefreshToken == first.Logins[0].RefreshToken {
		t.Fatalf("login.toml after renewal: %+v %v\nbefore: %+v\nwhoami: %s", renewed, err, first, r)
	}
}
