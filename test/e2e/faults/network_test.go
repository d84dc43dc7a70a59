package faults

import (
	"strings"
	"syscall"
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

// A worker host that vanishes without a word (power loss, kernel panic, a
// hung hypervisor): every packet to and from it is dropped, no FIN, no RST,
// and the host is frozen, so workerd cannot fence its own job. The
// orchestrator must mark it offline within heartbeat_timeout plus one health
// tick and requeue its job exactly once; the retry runs elsewhere. When the
// host comes back with the old attempt still there, that attempt is killed
// and its late report is refused as stale; the completed job stays completed.
func TestWorkerHostVanishes(t *testing.T) {
	fullOnly(t)
	const timeout, tick = 1500 * time.Millisecond, 200 * time.Millisecond
	// A short start-up grace: the fault comes soon after the start, and the
	// grace would hold the verdict back.
	o := StartOrchestratorWith(t, OrchOptions{Metrics: true, HeartbeatTimeout: timeout.String(), HealthCheck: tick.String(), StartupGrace: "100ms"})
	h := NewHistory(t, o)
	px := NewProxy(t, strings.TrimPrefix(o.URL, "http://"))
	pool := map[string]string{"pool": "p"}
	lost := o.StartWorker(WorkerSpec{Name: "vanishing", Persistent: true, URL: px.URL(), Labels: pool, Command: h.WrapperCommand()})
	_, id := h.Submit(trainFor(3), map[string]any{"worker_labels": pool})
	Eventually(t, 20*time.Second, "the job training on the vanishing host", func() bool { return len(JobProcs(id)) >= 2 })

	h.Fault("host vanishes: network black-holed (no FIN/RST), workerd and the job frozen")
	px.SetCut(true)
	vanished := time.Now()
	frozen := FreezeJob(id, lost.P.Pid())
	var offlineAfter time.Duration
	Eventually(t, 20*time.Second, "the vanished worker offline", func() bool {
		if o.Worker(lost.ID)["status"] == "offline" {
			offlineAfter = time.Since(vanished)
			return true
		}
		return false
	})
	// Offline first, then its attempt ends: wait for the requeue.
	var j map[string]any
	Eventually(t, 5*time.Second, "the job requeued", func() bool { j = o.Job(id); return j["status"] != "running" })
	if j["status"] != "queued" || j["retries_used"] != float64(1) {
		t.Errorf("after the host vanished the job is %v with retries_used %v, want queued with one retry spent", j["status"], j["retries_used"])
	}
	o.StartWorker(WorkerSpec{Name: "rescuer", Persistent: true, Labels: pool, Command: h.WrapperCommand()})
	o.WaitJob(id, "completed", 30*time.Second)

	h.Fault("host comes back: thawed, network restored")
	thawed := time.Now()
	for _, pid := range frozen {
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}
	px.SetCut(false)
	var killedAfter time.Duration
	Eventually(t, 20*time.Second, "the old attempt's processes gone", func() bool {
		for _, a := range JobProcs(id) {
			if a == "1" {
				return false
			}
		}
		killedAfter = time.Since(thawed)
		return true
	})
	Eventually(t, 20*time.Second, "the returned worker connected again and its late report refused", func() bool {
		return o.Worker(lost.ID)["connected"] == true && o.Metric("simpletuner_stale_attempt_rejections_total") >= 1
	})
	h.WaitAllTerminal(10 * time.Second)
	h.Finish()
	sum := h.Check(Expect{MaxRequeues: 1, MinStaleRejections: 1, Statuses: []string{"completed"}})
	at := Attempts(h.Final[id])
	if len(at) != 2 || at[0]["worker_id"] != lost.ID || at[0]["outcome"] != "worker_lost" || at[1]["worker_id"] == lost.ID {
		t.Errorf("attempts %v, want attempt 1 lost on the vanished worker and attempt 2 elsewhere", at)
	}
	if limit := timeout + tick + time.Second; offlineAfter > limit {
		t.Errorf("offline %s after the host vanished, want ≤ heartbeat_timeout %s + health tick %s (+1 s for a loaded machine)", offlineAfter.Round(time.Millisecond), timeout, tick)
	}
	t.Logf("RESULT %s: offline %s after the host vanished (heartbeat_timeout %s, health tick %s); the old attempt ran %s after the thaw before it was killed; %s",
		t.Name(), offlineAfter.Round(time.Millisecond), timeout, tick, killedAfter.Round(time.Millisecond), sum)
}
