package faults

import (
	"strings"
	"testing"
	"time"

	. "github.com/simpletuner/simpletuner-orchestration/test/e2e/e2etest"
)

// Asymmetric partition: the worker still reaches the orchestrator (heartbeats,
// reports), but its event stream went silent with the socket left open, as
// when a stateful firewall forgets the connection. workerd must notice within
// three of the ping intervals the orchestrator announced, open a new stream,
// and lose neither the job_submit nor the job_cancel sent into the dead one.
func TestAsymmetricStreamPartition(t *testing.T) {
	const ping = 500 * time.Millisecond
	o := StartOrchestratorWith(t, OrchOptions{Metrics: true, PingInterval: ping.String()})
	h := NewHistory(t, o)
	px := NewProxy(t, strings.TrimPrefix(o.URL, "http://"))
	w := o.StartWorker(WorkerSpec{Name: "half-open", Persistent: true, URL: px.URL(), Command: h.WrapperCommand()})
	_, long := h.Submit(trainFor(30), nil)
	o.WaitJob(long, "running", 20*time.Second)
	streams := px.Streams()

	h.Fault("stall the worker's event stream (orchestrator → worker bytes dropped, socket open)")
	stalled := time.Now()
	px.StallStreams(true)
	// Into the dead stream: a cancel of the running job, then a new job.
	if st, _ := o.Do("POST", "/api/queue/"+long+"/cancel", nil); st != 200 {
		t.Fatalf("cancel: %d", st)
	}
	var cancelledAfter time.Duration
	Eventually(t, 10*time.Second, "the running job cancelled", func() bool {
		if o.Job(long)["status"] == "cancelled" {
			cancelledAfter = time.Since(stalled)
			return true
		}
		return false
	})
	submitted := time.Now()
	_, next := h.Submit(trainFor(0.5), nil)

	var reconnectedAfter time.Duration
	Eventually(t, 20*time.Second, "a new stream opened by the worker", func() bool {
		if px.Streams() > streams {
			reconnectedAfter = time.Since(stalled)
			return true
		}
		return false
	})
	var runningAfter time.Duration
	Eventually(t, 20*time.Second, "the job sent into the dead stream running", func() bool {
		if j := o.Job(next); j["status"] == "running" || j["status"] == "completed" {
			runningAfter = time.Since(submitted)
			return true
		}
		return false
	})
	h.WaitAllTerminal(30 * time.Second)
	h.Finish()
	// The submit sent into the dead stream may be withdrawn once (no retry
	// spent) when the worker registers again without it.
	sum := h.Check(Expect{MaxRequeues: 1})
	if st := h.Final[long]["status"]; st != "cancelled" {
		t.Errorf("the job cancelled during the stall ended %v", st)
	}
	if st := h.Final[next]["status"]; st != "completed" || h.Final[next]["retries_used"] != float64(0) {
		t.Errorf("the job submitted during the stall: %v, retries_used %v; want completed with no retry spent", st, h.Final[next]["retries_used"])
	}
	// Three silent ping intervals, a fence tick and a reconnect back-off, with room for a loaded machine.
	if limit := 3*ping + 3*time.Second; reconnectedAfter > limit {
		t.Errorf("the worker noticed the dead stream after %s, want ≤ %s", reconnectedAfter.Round(time.Millisecond), limit)
	}
	if w.P.Cmd.ProcessState != nil {
		t.Errorf("workerd exited")
	}
	t.Logf("RESULT %s: cancel applied %s after the stall (heartbeat reply); new stream %s after the stall (ping %s); job submitted into the dead stream running %s after its submit; %s",
		t.Name(), cancelledAfter.Round(time.Millisecond), reconnectedAfter.Round(time.Millisecond), ping, runningAfter.Round(time.Millisecond), sum)
}
