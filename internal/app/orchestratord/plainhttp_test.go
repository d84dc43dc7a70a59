package orchestratord

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/testpki"
	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
)

// Serving the API over plain HTTP where other machines can reach it is
// announced at start; loopback, or TLS, is not.
func TestPlainHTTPOnTheNetworkIsWarnedAbout(t *testing.T) {
	t.Parallel()
	ca := testpki.NewCA(t, "test")
	certDir := t.TempDir()
	cert, key := ca.Server(t).Write(t, certDir, "server")
	tlsOn := fmt.Sprintf("[tls]\ncert_file = %q\nkey_file = %q\n", cert, key)
	for _, c := range []struct {
		name, listen, extra string
		warn                bool
	}{
		{"all interfaces", "0.0.0.0:0", "", true},
		{"loopback", "127.0.0.1:0", "", false},
		{"IPv6 loopback", "[::1]:0", "", false},
		{"all interfaces with TLS", "0.0.0.0:0", tlsOn, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, "o.toml")
			conf := fmt.Sprintf("[server]\nlisten = [%q]\nadmin_socket = \"\"\n[paths]\nstate_dir = %q\nconfigs_dir = %q\n[metrics]\nlisten = \"\"\n%s",
				c.listen, dir, dir, c.extra)
			if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
				t.Fatal(err)
			}
			args := []string{"--config", path}
			cfg, _, err := config.LoadOrchestrator(args, func(string) string { return "" })
			if err != nil {
				t.Fatal(err)
			}
			logs := &testutil.Buffer{}
			a := New(cfg, args, func(string) string { return "" }, slog.New(slog.NewTextHandler(logs, nil)), new(slog.LevelVar))
			ctx, cancel := context.WithCancel(context.Background())
			if err := a.Start(ctx); err != nil {
				if strings.Contains(err.Error(), "[::1]") {
					t.Skip("no IPv6 loopback here:", err)
				}
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() { _ = a.Serve(ctx); close(done) }()
			t.Cleanup(func() { cancel(); <-done })
			if got := strings.Contains(logs.String(), "served over plain HTTP"); got != c.warn {
				t.Fatalf("listen %s: warned %v, want %v:\n%s", c.listen, got, c.warn, logs.String())
			}
		})
	}
}
