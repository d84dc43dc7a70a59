package faults

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
	. "github.com/simpletuner/simpletuner-orchestration/test/e2e/e2etest"
)

// pingsSince is the WATCHDOG=1 pings that arrived after t0.
func pingsSince(n *testutil.NotifySocket, t0 time.Time) []time.Time {
	var out []time.Time
	for _, m := range n.All() {
		if m.At.After(t0) && m.Line("WATCHDOG=1") != "" {
			out = append(out, m.At)
		}
	}
	return out
}

// Watchdog: the orchestrator's scheduler loop freezes (a test hook holds the
// pass lock), so the WATCHDOG=1 pings stop and the test's NOTIFY_SOCKET
// listener, playing systemd with WatchdogSec=2s, sees none within that time;
// it then kills the daemon with SIGABRT (systemd's WatchdogSignal) and starts
// it again. No job is lost: the running ones ride it out, the ones submitted
// during the freeze run after the restart.
func TestWatchdogFreeze(t *testing.T) {
	fullOnly(t)
	const watchdogTimeout = 2 * time.Second
	n := testutil.ListenNotify(t)
	freeze := filepath.Join(t.TempDir(), "freeze")
	// The running jobs are to ride out the freeze and the restart. Under
	// the fault timers a worker fences its job after 1.125 s without an
	// acknowledged heartbeat, less than a SIGABRT and a restart take on a
	// loaded machine: this scenario's heartbeat timeout leaves the workers
	// 15 s, longer than that outage.
	o := StartOrchestratorWith(t, OrchOptions{Metrics: true, HeartbeatTimeout: "20s", Env: []string{
		"NOTIFY_SOCKET=" + n.Path, "WATCHDOG_USEC=" + "2000000", "SIMPLETUNER_ORCHESTRATORD_TEST_FREEZE=" + freeze}})
	h := NewHistory(t, o)
	for _, name := range []string{"a", "b"} {
		o.StartWorker(WorkerSpec{Name: name, Persistent: true, SelfFenceAfter: "30s", Command: h.WrapperCommand()})
	}
	for range 2 {
		h.Submit(trainFor(20), nil)
	}
	Eventually(t, 20*time.Second, "two jobs training", func() bool { return len(AllJobProcs()) >= 2 })
	if len(pingsSince(n, time.Time{})) == 0 {
		t.Fatalf("no WATCHDOG=1 before the freeze")
	}

	h.Fault("freeze the scheduler loop (test hook holds the pass lock)")
	if err := os.WriteFile(freeze, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	for range 3 {
		h.Submit(trainFor(0.3), nil) // accepted, but nobody dispatches them
	}
	// systemd's view: the first gap longer than WatchdogSec after the freeze.
	var lastPing time.Time
	var firedAfter time.Duration
	Eventually(t, 30*time.Second, "a WatchdogSec without WATCHDOG=1", func() bool {
		pings := pingsSince(n, frozen)
		lastPing = frozen
		if len(pings) > 0 {
			lastPing = pings[len(pings)-1]
		}
		if time.Since(lastPing) > watchdogTimeout {
			firedAfter = time.Since(frozen)
			return true
		}
		return false
	})
	// /readyz pings the database for at most 2 s and then answers 503: a
	// client that waited only those 2 s could give up just before it.
	if st := o.ReadyWithin(10 * time.Second); st == 0 {
		t.Errorf("the frozen orchestrator no longer answers /readyz at all")
	}
	h.Fault("watchdog fired: SIGABRT, unfreeze, restart")
	o.P.Signal(syscall.SIGABRT)
	if _, ok := o.P.Exited(10 * time.Second); !ok {
		t.Fatalf("the orchestrator did not exit on SIGABRT")
	}
	if err := os.Remove(freeze); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	o.Restart()
	Eventually(t, 10*time.Second, "WATCHDOG=1 again after the restart", func() bool { return len(pingsSince(n, restarted)) > 0 })
	h.WaitAllTerminal(60 * time.Second)
	h.Finish()
	sum := h.Check(Expect{MaxRequeues: 0, Statuses: []string{"completed"}})
	t.Logf("RESULT %s: last WATCHDOG=1 %s after the freeze; systemd (WatchdogSec %s) would fire %s after it; after SIGABRT and restart no job lost; %s",
		t.Name(), lastPing.Sub(frozen).Round(time.Millisecond), watchdogTimeout, firedAfter.Round(time.Millisecond), sum)
}
