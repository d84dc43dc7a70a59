// Package faults runs fault-injection scenarios against the real daemons:
// real orchestrators, workers and PostgreSQL, faults injected from outside
// (kill -9, partitions through a black-holing proxy, database restarts,
// hostile clients), every event recorded and the whole history checked
// afterwards (see e2etest.History.Check and docs/faults.md).
//
// Plain `go test ./...` runs the fast subset; the whole suite runs with
// SIMPLETUNER_FAULTS_FULL=1 (make faults).
package faults

import (
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/test/e2e/e2etest"
)

func TestMain(m *testing.M) { e2etest.MainWithFaultHooks(m) }

// fullOnly skips a scenario outside the full suite.
func fullOnly(t *testing.T) {
	t.Helper()
	if os.Getenv("SIMPLETUNER_FAULTS_FULL") == "" {
		t.Skip("full suite only: make faults (SIMPLETUNER_FAULTS_FULL=1)")
	}
}

func isFull() bool { return os.Getenv("SIMPLETUNER_FAULTS_FULL") != "" }

// trainFor is a demo-trainer config that trains for about seconds in 0.1 s steps.
func trainFor(seconds float64) map[string]any {
	return map[string]any{"steps": int(seconds * 10), "step_seconds": 0.1}
}

// baseline is what the orchestrator process and this test process held at a
// quiet moment.
type baseline struct {
	pid        int
	usage      e2etest.Usage
	est        int
	goroutines int
	sse        int64
}

func takeBaseline(o *e2etest.Orch) baseline {
	e2etest.CloseIdle()
	time.Sleep(200 * time.Millisecond) // let finished requests' goroutines go
	if testing.Verbose() {
		fmt.Printf("baseline fds of %d: %v\n", o.P.Pid(), e2etest.FDTargets(o.P.Pid()))
	}
	return baseline{pid: o.P.Pid(), usage: e2etest.ProcUsage(o.P.Pid()), est: e2etest.Established(o.Port()),
		goroutines: runtime.NumGoroutine(), sse: o.Metric("simpletuner_sse_connections")}
}

// check waits up to 15 s for the orchestrator's descriptors, sockets,
// established connections and SSE streams, and this process's goroutines, to
// come back to the baseline (descriptors on the SQLite files are the
// database pool's and are only reported; threads: the Go runtime keeps idle threads, so
// only a bounded growth is required).
func (b baseline) check(t *testing.T, o *e2etest.Orch) {
	t.Helper()
	if o.P.Pid() != b.pid {
		t.Fatalf("baseline taken on pid %d, orchestrator is now %d", b.pid, o.P.Pid())
	}
	var u e2etest.Usage
	var est, g int
	var sse int64
	ok := false
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		e2etest.CloseIdle()
		u, est, g, sse = e2etest.ProcUsage(b.pid), e2etest.Established(o.Port()), runtime.NumGoroutine(), o.Metric("simpletuner_sse_connections")
		if u.FDs-u.DBFiles <= b.usage.FDs-b.usage.DBFiles+2 && u.Sockets <= b.usage.Sockets+2 && est <= b.est+2 && g <= b.goroutines+5 &&
			(b.sse < 0 || sse <= b.sse) && u.Threads <= b.usage.Threads+16 {
			ok = true
			break
		}
	}
	t.Logf("RESOURCES baseline: %s established=%d goroutines=%d sse=%d; after: %s established=%d goroutines=%d sse=%d",
		b.usage, b.est, b.goroutines, b.sse, u, est, g, sse)
	if !ok {
		t.Errorf("resources not back to baseline within 15s: baseline %s established=%d goroutines=%d sse=%d, now %s established=%d goroutines=%d sse=%d; fds now: %v",
			b.usage, b.est, b.goroutines, b.sse, u, est, g, sse, e2etest.FDTargets(b.pid))
	}
}
