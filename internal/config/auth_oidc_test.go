package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

const oidcOK = "[auth.oidc]\nissuer = \"https://login.example.com/oauth2/default\"\nclient_id = \"0oa1b2c3\"\nredirect_url = \"https://tuner.example.com/ui/auth/oidc/callback\"\n"

func secretFile(t *testing.T, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "oidc-client-secret")
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// A good [auth.oidc] loads with the defaults filled in and the secret read
// from client_secret_file; the secret is never printed.
func TestOIDCConfigLoads(t *testing.T) {
	t.Parallel()
	c, _, err := loadO(t, oidcOK+"client_secret_file = \""+secretFile(t, "s3cret-value\n", 0o640)+"\"\n", env())
	if err != nil {
		t.Fatal(err)
	}
	d := c.Auth.OIDC
	if !d.Enabled() || d.GroupsClaim != "groups" || !slices.Equal(d.Scopes, []string{"openid", "profile", "email"}) {
		t.Errorf("defaults: %+v", d)
	}
	if d.ClientSecret.Value() != "s3cret-value" {
		t.Errorf("client secret %q, want the file's", d.ClientSecret.Value())
	}
	if c.OIDCRedirectURL() != "https://tuner.example.com/ui/auth/oidc/callback" {
		t.Errorf("redirect URL %q", c.OIDCRedirectURL())
	}
	if strings.Contains(c.Redacted(), "s3cret") {
		t.Errorf("the client secret is printed:\n%s", c.Redacted())
	}
}

// Without client_secret_file the secret is the systemd credential; the
// redirect URL defaults to the callback under server.public_url.
func TestOIDCSecretFromCredential(t *testing.T) {
	t.Parallel()
	creds := filepath.Dir(secretFile(t, "from-cred", 0o600))
	toml := "[server]\npublic_url = \"https://tuner.example.com\"\n\n[auth.oidc]\nissuer = \"https://kc.example.com/realms/ml\"\nclient_id = \"simpletuner\"\n"
	c, _, err := loadO(t, toml, env("CREDENTIALS_DIRECTORY", creds))
	if err != nil {
		t.Fatal(err)
	}
	if c.Auth.OIDC.ClientSecret.Value() != "from-cred" {
		t.Errorf("client secret %q, want the credential's", c.Auth.OIDC.ClientSecret.Value())
	}
	if got := c.OIDCRedirectURL(); got != "https://tuner.example.com/ui/auth/oidc/callback" {
		t.Errorf("redirect URL %q", got)
	}
	// The package ships an empty credential: that is no secret.
	empty := filepath.Dir(secretFile(t, "", 0o600))
	if _, _, err := loadO(t, toml, env("CREDENTIALS_DIRECTORY", empty)); err == nil || !strings.Contains(err.Error(), "no client secret") {
		t.Errorf("empty credential: %v", err)
	}
}

// Each mistake is reported with the file and line of the key, and names it.
func TestOIDCConfigErrors(t *testing.T) {
	t.Parallel()
	secret := "client_secret_file = \"" + secretFile(t, "x", 0o600) + "\"\n"
	for _, tc := range []struct{ toml, want string }{
		{oidcOK + "client_secret = \"hunter2\"\n",
			"o.toml:5: key auth.oidc.client_secret: a client secret is not kept in this file: put it in the file auth.oidc.client_secret_file names"},
		{oidcOK, "key auth.oidc.client_secret_file: no client secret: name a file holding it here, or put it in the systemd credential oidc-client-secret"},
		{oidcOK + "client_secret_file = \"/nonexistent/secret\"\n", "o.toml:5: key auth.oidc.client_secret_file: cannot read /nonexistent/secret"},
		{"[auth.oidc]\nissuer = \"http://login.example.com\"\nclient_id = \"c\"\nredirect_url = \"https://t.example.com/cb\"\n" + secret,
			"o.toml:2: key auth.oidc.issuer: \"http://login.example.com\" is plain http"},
		{"[auth.oidc]\nissuer = \"login.example.com\"\nclient_id = \"c\"\nredirect_url = \"https://t.example.com/cb\"\n" + secret,
			"o.toml:2: key auth.oidc.issuer: \"login.example.com\" is not an https:// URL"},
		{"[auth.oidc]\nissuer = \"https://login.example.com\"\nredirect_url = \"https://t.example.com/cb\"\n" + secret,
			"key auth.oidc.client_id: must be set with auth.oidc.issuer"},
		{"[auth.oidc]\nissuer = \"https://login.example.com\"\nclient_id = \"c\"\n" + secret,
			"key auth.oidc.redirect_url: must be set, or server.public_url"},
		{"[auth.oidc]\nissuer = \"https://login.example.com\"\nclient_id = \"c\"\nredirect_url = \"/ui/auth/oidc/callback\"\n" + secret,
			"o.toml:4: key auth.oidc.redirect_url: \"/ui/auth/oidc/callback\" is not an absolute http(s) URL"},
		{oidcOK + secret + "scopes = [\"profile\", \"email\"]\n", "o.toml:6: key auth.oidc.scopes: [\"profile\" \"email\"] must include \"openid\""},
		{oidcOK + secret + "groups_claim = \"\"\n", "o.toml:6: key auth.oidc.groups_claim: must not be empty"},
		{"[auth.oidc]\nclient_id = \"c\"\n", "o.toml:2: key auth.oidc.client_id: is set but auth.oidc.issuer is empty"},
		{"[auth.oidc]\ncli_client_id = \"ctl\"\n", "o.toml:2: key auth.oidc.cli_client_id: is set but auth.oidc.issuer is empty"},
		{"[auth]\nlogin_token_ttl = \"0s\"\n", "o.toml:2: key auth.login_token_ttl: must be greater than 0"},
		{"[auth]\npersonal_token_max_ttl = \"0s\"\n", "o.toml:2: key auth.personal_token_max_ttl: must be greater than 0"},
		{"[auth.oidc]\nissuerr = \"https://x\"\n", "o.toml:2: key auth.oidc.issuerr: unknown key (did you mean auth.oidc.issuer?)"},
	} {
		_, _, err := loadO(t, tc.toml, env())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q:\n got  %v\n want %q", tc.toml, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("the error shows the inline secret: %v", err)
		}
	}
}

// An issuer on this machine may be plain http (a test provider).
func TestOIDCLoopbackIssuer(t *testing.T) {
	t.Parallel()
	toml := "[auth.oidc]\nissuer = \"http://127.0.0.1:5556/dex\"\nclient_id = \"c\"\nredirect_url = \"http://127.0.0.1:8001/ui/auth/oidc/callback\"\n" +
		"client_secret_file = \"" + secretFile(t, "x", 0o600) + "\"\n"
	if _, _, err := loadO(t, toml, env()); err != nil {
		t.Fatal(err)
	}
}

// The command-line login's keys load with their defaults and as set.
func TestLoginKeys(t *testing.T) {
	t.Parallel()
	c, _, err := loadO(t, "", env())
	if err != nil {
		t.Fatal(err)
	}
	if a := c.Auth; a.LoginTokenTTL.Duration != 12*time.Hour || !a.PeopleTokens || a.PersonalTokenMaxTTL.Duration != 90*24*time.Hour {
		t.Errorf("defaults: ttl %v, people_tokens %v, max %v", a.LoginTokenTTL, a.PeopleTokens, a.PersonalTokenMaxTTL)
	}
	c, _, err = loadO(t, oidcOK+"client_secret_file = \""+secretFile(t, "x", 0o600)+"\"\ncli_client_id = \"simpletunerctl\"\n\n"+
		"[auth]\nlogin_token_ttl = \"2h\"\npeople_tokens = false\n", env())
	if err != nil {
		t.Fatal(err)
	}
	if a := c.Auth; a.LoginTokenTTL.Duration != 2*time.Hour || a.PeopleTokens || a.OIDC.CLIClientID != "simpletunerctl" {
		t.Errorf("set: ttl %v, people_tokens %v, cli_client_id %q", a.LoginTokenTTL, a.PeopleTokens, a.OIDC.CLIClientID)
	}
}
