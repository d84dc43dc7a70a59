package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
)

// The test binary doubles as the daemon under test: with DAEMON_TEST_HELPER set it runs
// a small app through Run (or Listen) so tests can send it real signals and hand it
// real socket-activated fds.
func TestMain(m *testing.M) {
	switch os.Getenv("DAEMON_TEST_HELPER") {
	case "":
		os.Exit(m.Run())
	case "run":
		os.Exit(helperRun())
	case "activation":
		os.Exit(helperActivation())
	default:
		fmt.Fprintln(os.Stderr, "unknown DAEMON_TEST_HELPER")
		os.Exit(2)
	}
}

// helperApp reads its "config" from $HELPER_DIR/config (a value starting with "bad" is
// invalid), is unhealthy while $HELPER_DIR/unhealthy exists, and as a Drainer finishes
// its "job" once $HELPER_DIR/finish exists.
type helperApp struct {
	dir      string
	mu       sync.Mutex
	cfg      string
	draining bool
	finished chan struct{}
}

type drainingHelper struct{ *helperApp }

func (a *helperApp) readConfig() (string, error) {
	b, err := os.ReadFile(filepath.Join(a.dir, "config"))
	if err != nil {
		return "", err
	}
	v := strings.TrimSpace(string(b))
	if v == "" || strings.HasPrefix(v, "bad") {
		return "", fmt.Errorf("config:1: invalid value %q", v)
	}
	return v, nil
}

func (a *helperApp) Start(context.Context) error {
	v, err := a.readConfig()
	if err != nil {
		return err
	}
	a.cfg = v
	return nil
}

func (a *helperApp) Serve(ctx context.Context) error {
	select {
	case <-ctx.Done():
	case <-a.finished:
	}
	return nil
}

func (a *helperApp) Healthy() error {
	if _, err := os.Stat(filepath.Join(a.dir, "unhealthy")); err == nil {
		return errors.New("loop stalled")
	}
	return nil
}

func (a *helperApp) Status() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := "config=" + a.cfg
	if a.draining {
		s += " draining"
	}
	return s
}

func (a *helperApp) Reload() error {
	v, err := a.readConfig()
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.cfg = v
	a.mu.Unlock()
	return nil
}

func (d drainingHelper) Drain() {
	d.mu.Lock()
	d.draining = true
	d.mu.Unlock()
	go func() {
		for {
			if _, err := os.Stat(filepath.Join(d.dir, "finish")); err == nil {
				close(d.finished)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
}

func helperRun() int {
	statusEvery = 100 * time.Millisecond
	a := &helperApp{dir: os.Getenv("HELPER_DIR"), finished: make(chan struct{})}
	var app App = a
	if os.Getenv("HELPER_DRAIN") != "" {
		app = drainingHelper{a}
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if err := Run(context.Background(), app, RunOptions{Logger: log, StopTimeout: 5 * time.Second}); err != nil {
		return 1
	}
	return 0
}

// activationApp binds "api" and "admin" through Listen and answers each HTTP request
// with the listener's name, whether it was activated, and what LISTEN_FDS it still sees.
type activationApp struct {
	listeners map[string][]net.Listener
}

func (a *activationApp) Start(context.Context) error {
	specs := []ListenSpec{
		{Name: "api", Addrs: splitNonEmpty(os.Getenv("HELPER_API_ADDRS"))},
		{Name: "admin", Addrs: splitNonEmpty(os.Getenv("HELPER_ADMIN_ADDRS")), UnixMode: 0o660},
	}
	ls, err := Listen(specs)
	a.listeners = ls
	return err
}

func (a *activationApp) Serve(ctx context.Context) error {
	var srvs []*http.Server
	for name, ls := range a.listeners {
		name := name
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "%s activated=%v listen_fds=%q", name, Activated(name), os.Getenv("LISTEN_FDS"))
		})}
		srvs = append(srvs, srv)
		for _, l := range ls {
			go srv.Serve(l)
		}
	}
	<-ctx.Done()
	for _, s := range srvs {
		s.Shutdown(context.Background())
	}
	return nil
}

func (a *activationApp) Healthy() error { return nil }
func (a *activationApp) Status() string {
	return fmt.Sprintf("serving %d listener groups", len(a.listeners))
}
func (a *activationApp) Reload() error { return nil }

func helperActivation() int {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := Run(context.Background(), &activationApp{}, RunOptions{Logger: log, StopTimeout: 5 * time.Second}); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	return 0
}

func splitNonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// shortTempDir keeps unix socket paths under the 108-byte sun_path limit.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// notifySocket reads what the daemon sends to NOTIFY_SOCKET in order: each
// method takes up where the one before stopped.
type notifySocket struct {
	*testutil.NotifySocket
	pos int
}

func listenNotify(t *testing.T) *notifySocket {
	return &notifySocket{NotifySocket: testutil.ListenNotify(t)}
}

// expect skips datagrams until one has a line starting with prefix and returns that line.
func (ns *notifySocket) expect(t *testing.T, prefix string) string {
	t.Helper()
	i := ns.Wait(t, ns.pos, 10*time.Second, "with a line starting "+prefix, func(m testutil.Notification) bool { return m.Line(prefix) != "" })
	ns.pos = i + 1
	return ns.All()[i].Line(prefix)
}

// next returns the next datagram that is not a watchdog ping.
func (ns *notifySocket) next(t *testing.T) string {
	t.Helper()
	i := ns.Wait(t, ns.pos, 10*time.Second, "other than WATCHDOG=1", func(m testutil.Notification) bool { return m.Text != "WATCHDOG=1" })
	ns.pos = i + 1
	return ns.All()[i].Text
}

// none fails if a line starting with prefix arrives within d.
func (ns *notifySocket) none(t *testing.T, prefix string, d time.Duration) {
	t.Helper()
	if i := ns.Find(ns.pos, d, func(m testutil.Notification) bool { return m.Line(prefix) != "" }); i >= 0 {
		t.Fatalf("unexpected notify line %q", ns.All()[i].Line(prefix))
	}
	ns.pos = len(ns.All())
}

// flush discards what arrives within d.
func (ns *notifySocket) flush(d time.Duration) {
	ns.Find(ns.pos, d, func(testutil.Notification) bool { return false })
	ns.pos = len(ns.All())
}

type proc struct {
	cmd    *exec.Cmd
	stderr *testutil.Buffer
	done   chan error
}

// startProc runs argv with the given extra environment (LISTEN_*, NOTIFY_SOCKET and
// WATCHDOG_* from the test's own environment are dropped).
func startProc(t *testing.T, argv []string, env ...string) *proc {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	for _, kv := range os.Environ() {
		switch strings.SplitN(kv, "=", 2)[0] {
		case "LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES", "NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID":
			continue
		}
		cmd.Env = append(cmd.Env, kv)
	}
	cmd.Env = append(cmd.Env, env...)
	p := &proc{cmd: cmd, stderr: &testutil.Buffer{}, done: make(chan error, 1)}
	cmd.Stdout = p.stderr
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("process output:\n%s", p.stderr.String())
		}
	})
	return p
}

func (p *proc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

func (p *proc) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err // keep it readable for Cleanup
		return err
	case <-time.After(15 * time.Second):
		t.Fatal("process did not exit within 15s")
		return nil
	}
}

func (p *proc) alive() bool {
	select {
	case err := <-p.done:
		p.done <- err
		return false
	default:
		return true
	}
}

func helperArgv() []string { return []string{os.Args[0], "-test.run=^$"} }
