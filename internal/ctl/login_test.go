package ctl

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/ctl/ctlconf"
)

// whoamiEcho answers whoami with the bearer token it got as the name, and
// counts the requests.
func whoamiEcho(t *testing.T) (*httptest.Server, *atomic.Int32) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		_ = json.NewEncoder(w).Encode(api.Whoami{Kind: "person", Name: strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")})
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func saveLogin(t *testing.T, home string, l ctlconf.Login) {
	t.Helper()
	logins := &ctlconf.Logins{Path: filepath.Join(home, ".config", "simpletuner", "login.toml")}
	logins.Put(l)
	if err := logins.Save(); err != nil {
		t.Fatal(err)
	}
}

// The login is the last source of a token: a token in ctl.toml (or a
// flag, or the environment) wins over it.
func TestLoginTokenComesLast(t *testing.T) {
	srv, _ := whoamiEcho(t)
	home := t.TempDir()
	saveLogin(t, home, ctlconf.Login{URL: srv.URL, Token: "sta_login", ExpiresAt: fixtureNow.Add(time.Hour), Provider: "ldap"})
	env := map[string]string{"HOME": home, "SIMPLETUNER_URL": srv.URL}
	r := runMain(t, env, "", "whoami")
	if r.code != 0 || !strings.Contains(r.stdout, "sta_login") || !strings.Contains(r.stdout, "login (ldap)") {
		t.Fatalf("with only a login: %+v", r)
	}
	ctlTOML := filepath.Join(home, ".config", "simpletuner", "ctl.toml")
	if err := os.WriteFile(ctlTOML, []byte("token = \"sta_ctl\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := runMain(t, env, "", "whoami"); r.code != 0 || !strings.Contains(r.stdout, "sta_ctl") {
		t.Fatalf("ctl.toml's token must win: %+v", r)
	}
	env["SIMPLETUNER_ADMIN_TOKEN"] = "sta_env"
	if r := runMain(t, env, "", "whoami"); r.code != 0 || !strings.Contains(r.stdout, "sta_env") {
		t.Fatalf("the environment's token must win: %+v", r)
	}
}

// An expired login, with no refresh token and no terminal to ask on,
// stops the command before any request with exit 4 and what to do; one
// that only nears its end is used while it lasts.
func TestExpiredLoginSaysSo(t *testing.T) {
	srv, requests := whoamiEcho(t)
	home := t.TempDir()
	env := map[string]string{"HOME": home, "SIMPLETUNER_URL": srv.URL}
	saveLogin(t, home, ctlconf.Login{URL: srv.URL, Token: "sta_login", ExpiresAt: fixtureNow.Add(30 * time.Second), Provider: "oidc"})
	if r := runMain(t, env, "", "whoami"); r.code != 0 || !strings.Contains(r.stdout, "sta_login") {
		t.Fatalf("a login with 30 seconds left: %+v", r)
	}
	requests.Store(0)
	at := fixtureNow.Add(-time.Second)
	saveLogin(t, home, ctlconf.Login{URL: srv.URL, Token: "sta_login", ExpiresAt: at, Provider: "oidc"})
	r := runMain(t, env, "", "whoami")
	want := "simpletunerctl whoami: your login expired at " + at.UTC().Format(time.RFC3339) + "; run simpletunerctl login\n"
	if r.code != ExitAuth || r.stderr != want || requests.Load() != 0 {
		t.Fatalf("got %+v after %d requests; want exit 4 and %q", r, requests.Load(), want)
	}
}
