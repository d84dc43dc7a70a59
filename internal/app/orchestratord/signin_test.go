package orchestratord

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
)

// With [auth.oidc] set, the daemon starts without asking the provider
// anything (here nothing answers at the issuer), the sign-in page offers
// the provider's link, and a sign-in started while the provider is down is
// refused with 503. A reload that changes [auth.oidc] warns that it needs
// a restart.
func TestOIDCWiredWithoutContactingTheProvider(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "oidc-secret")
	if err := os.WriteFile(secret, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", testutil.MustFreePort(t))
	path := filepath.Join(dir, "o.toml")
	write := func(name string) {
		conf := fmt.Sprintf("[server]\nlisten = [%q]\nadmin_socket = \"\"\npublic_url = \"http://%s\"\n[paths]\nstate_dir = %q\nconfigs_dir = %q\n"+
			"[metrics]\nlisten = \"\"\n[auth.oidc]\nissuer = \"http://127.0.0.1:1\"\nclient_id = \"orchestrator\"\nclient_secret_file = %q\ndisplay_name = %q\n",
			addr, addr, dir, dir, secret, name)
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("Example SSO")
	args := []string{"--config", path}
	cfg, _, err := config.LoadOrchestrator(args, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	logs := &testutil.Buffer{}
	a := New(cfg, args, func(string) string { return "" }, slog.New(slog.NewTextHandler(logs, nil)), new(slog.LevelVar))
	ctx, cancel := context.WithCancel(context.Background())
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = a.Serve(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	get := func(p string) (int, string) {
		t.Helper()
		res, err := http.Get("http://" + addr + p)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, body := get("/ui/signin"); code != 200 || !strings.Contains(body, "Sign in with Example SSO") {
		t.Fatalf("sign-in page: %d\n%s", code, body)
	}
	if code, body := get("/ui/auth/oidc/start?next=%2Fui%2F"); code != http.StatusServiceUnavailable || !strings.Contains(body, "did not answer") {
		t.Fatalf("a sign-in with the provider down: %d\n%s", code, body)
	}

	write("Another SSO")
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), `msg="config change needs a restart to take effect" key=auth.oidc`) {
		t.Fatalf("no restart warning for [auth.oidc]:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "s3cret") {
		t.Fatal("the client secret was logged")
	}
}
