package orchestratord

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/adminapi"
	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
)

// testApp starts the orchestrator app on a loopback port and SQLite, with an
// admin token; write rewrites its configuration file.
type testApp struct {
	app   *App
	url   string
	admin string
	logs  *testutil.Buffer
	write func(maxBody int, listen string)
}

func startApp(t *testing.T) *testApp {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "o.toml")
	addr := fmt.Sprintf("127.0.0.1:%d", testutil.MustFreePort(t))
	write := func(maxBody int, listen string) {
		conf := fmt.Sprintf("[server]\nlisten = [%q]\nadmin_socket = \"\"\nmax_body_bytes = %d\n[paths]\nstate_dir = %q\nconfigs_dir = %q\n[metrics]\nlisten = \"\"\n",
			listen, maxBody, dir, dir)
		if err := os.WriteFile(path+".tmp", []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil { // a reload never reads half a file
			t.Fatal(err)
		}
	}
	write(4096, addr)
	args := []string{"--config", path}
	cfg, _, err := config.LoadOrchestrator(args, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	logs := &testutil.Buffer{}
	level := new(slog.LevelVar)
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: level}))
	a := New(cfg, args, func(string) string { return "" }, log, level)
	ctx, cancel := context.WithCancel(context.Background())
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = a.Serve(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	tok, token, err := adminapi.NewAdminToken("test", []string{auth.ScopeAll})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.store.CreateAdminToken(context.Background(), tok, nil); err != nil {
		t.Fatal(err)
	}
	return &testApp{app: a, url: "http://" + addr, admin: token, logs: logs, write: func(maxBody int, listen string) {
		if listen == "" {
			listen = addr
		}
		write(maxBody, listen)
	}}
}

func (ta *testApp) submit(t *testing.T, bodyLen int) int {
	t.Helper()
	body := `{"config": {"pad": "` + strings.Repeat("x", bodyLen) + `"}}`
	req, _ := http.NewRequest("POST", ta.url+"/api/queue/submit", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+ta.admin)
	res, err := testutil.Client.Do(req)
	if err != nil {
		t.Error(err)
		return 0
	}
	res.Body.Close()
	return res.StatusCode
}

// Reloads replace the options while requests read them: under the race
// detector nothing may race, every request gets an answer, and the last
// reload is the one in force.
func TestReloadWhileServing(t *testing.T) {
	ta := startApp(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if code := ta.submit(t, 1500); code != 201 && code != 413 {
					t.Errorf("submit answered %d", code)
					return
				}
			}
		}()
	}
	for i := range 200 {
		ta.write(1024+i%2*4096, "")
		if err := ta.app.Reload(); err != nil {
			t.Fatalf("reload %d: %v", i, err)
		}
	}
	close(stop)
	wg.Wait()
	ta.write(1024, "")
	if err := ta.app.Reload(); err != nil {
		t.Fatal(err)
	}
	if code := ta.submit(t, 1500); code != 413 {
		t.Fatalf("after the last reload set max_body_bytes = 1024, a 1.5 kB body got %d, want 413", code)
	}
}

// A key that needs a restart is reported at every reload that still differs
// from what the daemon started with, not only at the first.
func TestReloadWarnsEveryTime(t *testing.T) {
	ta := startApp(t)
	ta.write(4096, "127.0.0.1:1")
	for range 3 {
		if err := ta.app.Reload(); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(ta.logs.String(), "config change needs a restart to take effect"); n != 3 {
		t.Fatalf("%d restart warnings for 3 reloads of a changed server.listen:\n%s", n, ta.logs.String())
	}
	if code := ta.submit(t, 10); code != 201 {
		t.Fatalf("submit after the reloads answered %d", code)
	}
}

// A second orchestratord on the same embedded database is refused at start,
// before it binds a port, naming the lock and its holder; vacuum is refused
// too while the first one runs.
func TestSecondOrchestratorOnOneSQLiteFileRefused(t *testing.T) {
	t.Parallel()
	first := startApp(t)
	dir := filepath.Dir(first.app.cfg.Paths.StateDir + "/x")
	second := filepath.Join(t.TempDir(), "second.toml")
	port := testutil.MustFreePort(t)
	conf := fmt.Sprintf("[server]\nlisten = [\"127.0.0.1:%d\"]\nadmin_socket = \"\"\n[paths]\nstate_dir = %q\nconfigs_dir = %q\n[metrics]\nlisten = \"\"\n",
		port, dir, dir)
	if err := os.WriteFile(second, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--config", second}
	cfg, _, err := config.LoadOrchestrator(args, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	err = New(cfg, args, nil, slog.New(slog.DiscardHandler), new(slog.LevelVar)).Start(context.Background())
	lock := filepath.Join(dir, "orchestrator.db.lock")
	if err == nil || !strings.Contains(err.Error(), "in use by another simpletuner-orchestratord: process "+strconv.Itoa(os.Getpid())+" holds "+lock) {
		t.Fatalf("the second orchestratord's start: %v", err)
	}
	if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
		c.Close()
		t.Error("the second orchestratord left a listener open")
	}
	var out, errOut strings.Builder
	if code := Main([]string{"--config", second, "vacuum"}, func(string) string { return "" }, &out, &errOut); code != ExitFailed ||
		!strings.Contains(errOut.String(), "in use by another simpletuner-orchestratord") {
		t.Errorf("vacuum beside a running orchestrator: exit %d\n%s", code, errOut.String())
	}
}
