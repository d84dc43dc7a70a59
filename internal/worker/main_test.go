package worker

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"

	"github.com/simpletuner/simpletuner-orchestration/internal/gpu"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// demoTrainer is test/demo-trainer, built once for all tests.
var demoTrainer string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "workerd-test-")
	if err != nil {
		panic(err)
	}
	demoTrainer = filepath.Join(dir, "demo-trainer")
	build := exec.Command("go", "build", "-o", demoTrainer, "../../test/demo-trainer")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the demo trainer:", err)
		os.Exit(2)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// fakeGPUs is a two-GPU machine.
type fakeGPUs struct{ gpu.Unwatched }

func (fakeGPUs) Inventory() (gpu.Inventory, error) {
	return gpu.Inventory{Count: 2, Driver: "550.54.15", Devices: []gpu.Device{
		{GPUDevice: protocol.GPUDevice{Index: 0, UUID: "GPU-aaaa", Name: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559}},
		{GPUDevice: protocol.GPUDevice{Index: 1, UUID: "GPU-bbbb", Name: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559}},
	}}, nil
}

func (fakeGPUs) Telemetry() ([]protocol.GPUTelemetry, error) {
	return []protocol.GPUTelemetry{{UUID: "GPU-aaaa", UtilizationPct: 97}, {UUID: "GPU-bbbb", UtilizationPct: 95}}, nil
}

func (fakeGPUs) Close() error { return nil }

// testOptions are fast timers against f.
func testOptions(t *testing.T, f *fakeOrch, logs *testutil.Buffer) Options {
	state := t.TempDir()
	return Options{
		URL:            f.url(),
		Token:          f.token,
		Name:           "test-worker",
		Persistent:     true,
		Labels:         map[string]string{"site": "test"},
		StateDir:       state,
		Version:        "test",
		Command:        []string{demoTrainer},
		CancelGrace:    300 * time.Millisecond,
		JobEnv:         map[string]string{"EXTRA_FROM_CONFIG": "yes"},
		SelfFenceAfter: 10 * time.Second,
		ReconnectMax:   100 * time.Millisecond,
		GPU:            fakeGPUs{},
		Logger:         slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Timers: Timers{
			ReconnectBase:     5 * time.Millisecond,
			HeartbeatInterval: 20 * time.Millisecond,
			PingInterval:      50 * time.Millisecond,
			StableAfter:       time.Second,
			ReportRetry:       50 * time.Millisecond,
			LogPoll:           10 * time.Millisecond,
			LogDrain:          3 * time.Second,
			RequestTimeout:    2 * time.Second,
			ShutdownTimeout:   2 * time.Second,
		},
	}
}

// running is a Worker serving in the background.
type running struct {
	w      *Worker
	cancel context.CancelFunc
	done   chan struct{} // closed when Serve returned; err is its result
	err    error
	logs   *testutil.Buffer
}

// wait returns Serve's result, failing the test after timeout.
func (r *running) wait(t *testing.T, timeout time.Duration) error {
	t.Helper()
	select {
	case <-r.done:
		return r.err
	case <-time.After(timeout):
		t.Fatalf("Serve did not return within %s; status %q", timeout, r.w.Status())
		return nil
	}
}

// setup starts a fake orchestrator and a worker against it; tweak adjusts the
// options. The worker is stopped when the test ends.
func setup(t *testing.T, tweak func(*Options)) (*fakeOrch, *running) {
	t.Helper()
	f := newFakeOrch(t)
	return f, startWorker(t, f, tweak)
}

func startWorker(t *testing.T, f *fakeOrch, tweak func(*Options)) *running {
	t.Helper()
	logs := &testutil.Buffer{}
	opt := testOptions(t, f, logs)
	if tweak != nil {
		tweak(&opt)
	}
	w, err := New(opt)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	r := &running{w: w, cancel: cancel, done: make(chan struct{}), logs: logs}
	go func() {
		r.err = w.Serve(ctx)
		close(r.done)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(15 * time.Second):
			t.Errorf("worker did not stop")
		}
		if t.Failed() {
			t.Logf("worker log:\n%s", logs.String())
		}
		if strings.Contains(logs.String(), f.token) {
			t.Errorf("the worker token appears in the log")
		}
	})
	return r
}

// connected waits until the worker holds a stream.
func (f *fakeOrch) connected(n int) {
	f.t.Helper()
	f.waitFor(fmt.Sprintf("%d stream(s)", n), 10*time.Second, func() bool { return f.streams >= n })
}

// pidsOf reads the pids the demo trainer wrote into its working directory.
func pidsOf(t *testing.T, dir string) []int {
	t.Helper()
	var pids []int
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(filepath.Join(dir, "pids.txt"))
		if err == nil {
			for _, f := range strings.Fields(string(b)) {
				n, _ := strconv.Atoi(f)
				pids = append(pids, n)
			}
			if len(pids) > 0 {
				return pids
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pids.txt in %s", dir)
		}
		time.Sleep(10 * time.Millisecond) // polling a file the child writes
	}
}

// waitDead waits until none of pids is alive.
func waitDead(t *testing.T, pids []int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var left []int
		for _, p := range pids {
			if testutil.Running(p) {
				left = append(left, p)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes still alive after %s: %v", timeout, left)
		}
		time.Sleep(10 * time.Millisecond) // polling the kernel's process table
	}
}
