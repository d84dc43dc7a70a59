package daemon

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
)

// fakeApp is driven directly by in-process tests.
type fakeApp struct {
	startGate  chan struct{} // Start waits for it when non-nil
	startErr   error
	serveErr   error
	finish     chan struct{} // closing it makes Serve return by itself
	ignoreStop bool          // Serve ignores cancellation (shutdown deadline test)
	unhealthy  atomic.Bool
	sawHealthy chan error // every Healthy() result, when non-nil
	status     atomic.Value
	served     atomic.Bool
}

func newFakeApp() *fakeApp {
	a := &fakeApp{finish: make(chan struct{})}
	a.status.Store("idle, 0 jobs")
	return a
}

func (a *fakeApp) Start(ctx context.Context) error {
	if a.startGate != nil {
		select {
		case <-a.startGate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return a.startErr
}

func (a *fakeApp) Serve(ctx context.Context) error {
	a.served.Store(true)
	if a.serveErr != nil {
		return a.serveErr
	}
	if a.ignoreStop {
		<-a.finish
		return nil
	}
	select {
	case <-ctx.Done():
	case <-a.finish:
	}
	return nil
}

func (a *fakeApp) Healthy() error {
	var err error
	if a.unhealthy.Load() {
		err = errors.New("scheduler loop stalled")
	}
	if a.sawHealthy != nil {
		select {
		case a.sawHealthy <- err:
		default:
		}
	}
	return err
}

func (a *fakeApp) Status() string { return a.status.Load().(string) }
func (a *fakeApp) Reload() error  { return nil }

// runApp starts Run in a goroutine with NOTIFY_SOCKET pointing at a fresh listener.
func runApp(t *testing.T, ctx context.Context, app App, opt RunOptions) (*notifySocket, chan error) {
	t.Helper()
	ns := listenNotify(t)
	t.Setenv("NOTIFY_SOCKET", ns.Path)
	statusEvery = 50 * time.Millisecond
	t.Cleanup(func() { statusEvery = 2 * time.Second })
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.NewTextHandler(&testutil.Buffer{}, nil))
	}
	done := make(chan error, 1)
	go func() { done <- Run(ctx, app, opt) }()
	return ns, done
}

func waitRun(t *testing.T, done chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s")
		return nil
	}
}

func TestRunLifecycleAndWatchdog(t *testing.T) {
	t.Setenv("WATCHDOG_USEC", "200000")
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	app := newFakeApp()
	app.startGate = make(chan struct{})
	app.sawHealthy = make(chan error, 1)
	logs := &testutil.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns, done := runApp(t, ctx, app, RunOptions{Logger: slog.New(slog.NewTextHandler(logs, nil))})

	if got := ns.expect(t, "STATUS="); got != "STATUS=Starting" {
		t.Fatalf("first status = %q", got)
	}
	// Neither READY=1 nor watchdog pings before Start returns.
	ns.none(t, "READY=1", 300*time.Millisecond)
	close(app.startGate)
	ready := ns.next(t)
	if ready != "READY=1\nSTATUS=idle, 0 jobs" {
		t.Fatalf("ready message = %q", ready)
	}

	ns.expect(t, "WATCHDOG=1")
	ns.expect(t, "WATCHDOG=1")

	app.status.Store("busy, 1 job\nsecond line")
	if got := ns.expect(t, "STATUS="); got != "STATUS=busy, 1 job second line" {
		t.Fatalf("status = %q", got)
	}

	// A stalled loop withholds pings, and says so once.
	app.unhealthy.Store(true)
	for err := range app.sawHealthy {
		if err != nil {
			break
		}
	}
	ns.flush(50 * time.Millisecond)
	ns.none(t, "WATCHDOG=1", 600*time.Millisecond)
	app.unhealthy.Store(false)
	ns.expect(t, "WATCHDOG=1")
	if n := strings.Count(logs.String(), "withholding watchdog pings"); n != 1 {
		t.Fatalf("logged withholding %d times, want once:\n%s", n, logs)
	}

	cancel()
	if got := ns.next(t); got != "STOPPING=1" {
		t.Fatalf("first message on shutdown = %q, want STOPPING=1", got)
	}
	if err := waitRun(t, done); err != nil {
		t.Fatalf("Run = %v", err)
	}
}

func TestRunWatchdogForOtherPID(t *testing.T) {
	t.Setenv("WATCHDOG_USEC", "100000")
	t.Setenv("WATCHDOG_PID", "1")
	app := newFakeApp()
	ctx, cancel := context.WithCancel(context.Background())
	ns, done := runApp(t, ctx, app, RunOptions{})
	ns.expect(t, "READY=1")
	ns.none(t, "WATCHDOG=1", 400*time.Millisecond)
	cancel()
	if err := waitRun(t, done); err != nil {
		t.Fatal(err)
	}
}

func TestRunStartFailure(t *testing.T) {
	app := newFakeApp()
	app.startErr = errors.New("migration 003 failed")
	ns, done := runApp(t, context.Background(), app, RunOptions{})
	err := waitRun(t, done)
	if err == nil || !strings.Contains(err.Error(), "migration 003 failed") {
		t.Fatalf("Run = %v", err)
	}
	if got := ns.expect(t, "STATUS=Start failed"); !strings.Contains(got, "migration 003") {
		t.Fatalf("status = %q", got)
	}
	if app.served.Load() {
		t.Fatal("Serve ran after a failed Start")
	}
	ns.none(t, "READY=1", 100*time.Millisecond)
}

func TestRunServeFailure(t *testing.T) {
	app := newFakeApp()
	app.serveErr = errors.New("listener closed")
	ns, done := runApp(t, context.Background(), app, RunOptions{})
	if err := waitRun(t, done); err == nil || !strings.Contains(err.Error(), "listener closed") {
		t.Fatalf("Run = %v", err)
	}
	ns.expect(t, "STATUS=Failed: listener closed")
}

func TestRunAppFinishesByItself(t *testing.T) {
	app := newFakeApp()
	ns, done := runApp(t, context.Background(), app, RunOptions{})
	ns.expect(t, "READY=1")
	close(app.finish)
	if err := waitRun(t, done); err != nil {
		t.Fatal(err)
	}
	ns.expect(t, "STOPPING=1")
}

func TestRunShutdownDeadline(t *testing.T) {
	app := newFakeApp()
	app.ignoreStop = true
	defer close(app.finish)
	ctx, cancel := context.WithCancel(context.Background())
	ns, done := runApp(t, ctx, app, RunOptions{StopTimeout: 200 * time.Millisecond})
	ns.expect(t, "READY=1")
	cancel()
	if err := waitRun(t, done); !errors.Is(err, ErrStopTimeout) {
		t.Fatalf("Run = %v, want ErrStopTimeout", err)
	}
}

func TestRunStopDuringStart(t *testing.T) {
	app := newFakeApp()
	app.startGate = make(chan struct{}) // never opened: only cancellation ends Start
	ctx, cancel := context.WithCancel(context.Background())
	ns, done := runApp(t, ctx, app, RunOptions{})
	ns.expect(t, "STATUS=Starting")
	cancel()
	if err := waitRun(t, done); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if app.served.Load() {
		t.Fatal("Serve ran after stop during start")
	}
}

// The subprocess tests below send real signals to a copy of the test binary.

func startSignalHelper(t *testing.T, drain bool) (*proc, *notifySocket, string) {
	t.Helper()
	dir := shortTempDir(t)
	writeFile(t, filepath.Join(dir, "config"), "first")
	ns := listenNotify(t)
	env := []string{"DAEMON_TEST_HELPER=run", "HELPER_DIR=" + dir, "NOTIFY_SOCKET=" + ns.Path}
	if drain {
		env = append(env, "HELPER_DRAIN=1")
	}
	p := startProc(t, helperArgv(), env...)
	if got := ns.expect(t, "STATUS=config="); got != "STATUS=config=first" {
		t.Fatalf("status after start = %q", got)
	}
	return p, ns, dir
}

func TestSignalReloadKeepsOldConfigOnError(t *testing.T) {
	t.Parallel()
	p, ns, dir := startSignalHelper(t, false)

	writeFile(t, filepath.Join(dir, "config"), "bad value")
	p.signal(t, syscall.SIGHUP)
	reloading := ns.next(t)
	if !strings.HasPrefix(reloading, "RELOADING=1\nMONOTONIC_USEC=") {
		t.Fatalf("reload message = %q", reloading)
	}
	after := ns.next(t)
	if !strings.HasPrefix(after, "READY=1\nSTATUS=Reload failed, previous configuration kept: config:1: invalid value") {
		t.Fatalf("message after failed reload = %q", after)
	}
	// The status poll reports the old config again: it is still in effect.
	if got := ns.expect(t, "STATUS=config="); got != "STATUS=config=first" {
		t.Fatalf("status after failed reload = %q", got)
	}
	if !p.alive() {
		t.Fatal("daemon exited after a bad reload")
	}

	writeFile(t, filepath.Join(dir, "config"), "second")
	p.signal(t, syscall.SIGHUP)
	ns.expect(t, "RELOADING=1")
	if got := ns.next(t); got != "READY=1\nSTATUS=config=second" {
		t.Fatalf("message after good reload = %q", got)
	}

	p.signal(t, syscall.SIGTERM)
	if got := ns.next(t); got != "STOPPING=1" {
		t.Fatalf("first message after SIGTERM = %q", got)
	}
	if err := p.wait(t); err != nil {
		t.Fatalf("exit: %v", err)
	}
	if !strings.Contains(p.stderr.String(), "reload failed; keeping the previous configuration") {
		t.Fatalf("failed reload not logged:\n%s", p.stderr)
	}
}

func TestSignalDrainThenCancel(t *testing.T) {
	t.Parallel()
	p, ns, _ := startSignalHelper(t, true)

	p.signal(t, syscall.SIGTERM)
	if got := ns.next(t); !strings.HasPrefix(got, "STOPPING=1\nSTATUS=Draining") {
		t.Fatalf("first message after SIGTERM = %q", got)
	}
	ns.expect(t, "STATUS=config=first draining")
	if !p.alive() {
		t.Fatal("first SIGTERM stopped a draining daemon")
	}

	p.signal(t, syscall.SIGTERM)
	ns.expect(t, "STATUS=Stopping (terminated)")
	if err := p.wait(t); err != nil {
		t.Fatalf("exit: %v", err)
	}
}

func TestSignalDrainFinishesJob(t *testing.T) {
	t.Parallel()
	p, ns, dir := startSignalHelper(t, true)

	p.signal(t, syscall.SIGINT)
	ns.expect(t, "STATUS=Draining")
	writeFile(t, filepath.Join(dir, "finish"), "")
	ns.expect(t, "STATUS=Finished")
	if err := p.wait(t); err != nil {
		t.Fatalf("exit: %v", err)
	}
}

func TestSignalStopWithoutDrainer(t *testing.T) {
	t.Parallel()
	p, ns, _ := startSignalHelper(t, false)
	p.signal(t, syscall.SIGINT)
	if got := ns.next(t); got != "STOPPING=1" {
		t.Fatalf("first message after SIGINT = %q", got)
	}
	ns.expect(t, "STATUS=Stopped")
	if err := p.wait(t); err != nil {
		t.Fatalf("exit: %v", err)
	}
}

func TestSignalWatchdogStall(t *testing.T) {
	t.Parallel()
	dir := shortTempDir(t)
	writeFile(t, filepath.Join(dir, "config"), "first")
	ns := listenNotify(t)
	// WATCHDOG_PID is left out: systemd omits it too when the main PID is the target.
	p := startProc(t, helperArgv(), "DAEMON_TEST_HELPER=run", "HELPER_DIR="+dir,
		"NOTIFY_SOCKET="+ns.Path, "WATCHDOG_USEC=200000")
	ns.expect(t, "READY=1")
	ns.expect(t, "WATCHDOG=1")
	writeFile(t, filepath.Join(dir, "unhealthy"), "")
	// Pings stop within two periods of the stall, and stay stopped.
	ns.flush(300 * time.Millisecond)
	ns.none(t, "WATCHDOG=1", 600*time.Millisecond)
	os.Remove(filepath.Join(dir, "unhealthy"))
	ns.expect(t, "WATCHDOG=1")
	p.signal(t, syscall.SIGTERM)
	if err := p.wait(t); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
