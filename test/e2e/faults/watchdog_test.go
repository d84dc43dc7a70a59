package faults

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	. "github.com/simpletuner/simpletuner-orchestration/test/e2e/e2etest"
)

// notifyListener plays systemd's side of sd_notify: it records when each
// WATCHDOG=1 arrived.
type notifyListener struct {
	path  string
	conn  *net.UnixConn
	mu    sync.Mutex
	pings []time.Time
}

func listenNotify(t *testing.T) *notifyListener {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	n := &notifyListener{path: path, conn: conn}
	t.Cleanup(func() { conn.Close() })
	go func() {
		buf := make([]byte, 4096)
		for {
			k, err := conn.Read(buf)
			if err != nil {
				return
			}
			if strings.Contains(string(buf[:k]), "WATCHDOG=1") {
				n.mu.Lock()
				n.pings = append(n.pings, time.Now())
				n.mu.Unlock()
			}
		}
	}()
	return n
}

// since returns the pings after t0.
func (n *notifyListener) since(t0 time.Time) []time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []time.Time
	for _, p := range n.pings {
		if p.After(t0) {
			out = append(out, p)
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
	n := listenNotify(t)
	freeze := filepath.Join(t.TempDir(), "freeze")
	o := StartOrchestratorWith(t, OrchOptions{Metrics: true, Env: []string{
		"NOTIFY_SOCKET=" + n.path, "WATCHDOG_USEC=" + "2000000", "SIMPLETUNER_ORCHESTRATORD_TEST_FREEZE=" + freeze}})
	h := NewHistory(t, o)
	for _, name := range []string{"a", "b"} {
		o.StartWorker(WorkerSpec{Name: name, Persistent: true, SelfFenceAfter: "30s", Command: h.WrapperCommand()})
	}
	for range 2 {
		h.Submit(trainFor(20), nil)
	}
	Eventually(t, 20*time.Second, "two jobs training", func() bool { return len(AllJobProcs()) >= 2 })
	if len(n.since(time.Time{})) == 0 {
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
		pings := n.since(frozen)
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
	if st := o.Ready(); st == 0 {
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
	Eventually(t, 10*time.Second, "WATCHDOG=1 again after the restart", func() bool { return len(n.since(restarted)) > 0 })
	h.WaitAllTerminal(60 * time.Second)
	h.Finish()
	sum := h.Check(Expect{MaxRequeues: 0, Statuses: []string{"completed"}})
	t.Logf("RESULT %s: last WATCHDOG=1 %s after the freeze; systemd (WatchdogSec %s) would fire %s after it; after SIGABRT and restart no job lost; %s",
		t.Name(), lastPing.Sub(frozen).Round(time.Millisecond), watchdogTimeout, firedAfter.Round(time.Millisecond), sum)
}
