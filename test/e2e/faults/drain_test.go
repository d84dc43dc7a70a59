package faults

import (
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/simpletuner/simpletuner-orchestration/test/e2e/e2etest"
)

// Drain with a long job (a 10-minute job, scaled to 8 s). An admin drain:
// the worker stays online and heartbeating until its job ends, takes no new
// job, then shows drained (draining, nothing running) until resumed. A stop
// signal (systemctl stop) on a worker whose job outlasts worker.drain_timeout:
// it drains first, then stops the job with its grace before the unit's stop
// timeout would kill it, the job is requeued exactly once without spending a
// retry (an admin stopped the worker, the job did nothing wrong) and
// completes elsewhere, and workerd exits 0.
func TestDrainWithLongJob(t *testing.T) {
	fullOnly(t)
	o := StartOrchestratorWith(t, OrchOptions{Metrics: true})
	h := NewHistory(t, o)
	p, q := map[string]string{"pool": "p"}, map[string]string{"pool": "q"}
	admin := o.StartWorker(WorkerSpec{Name: "admin-drained", Persistent: true, Labels: p, Command: h.WrapperCommand()})
	const drainTimeout, grace = 1500 * time.Millisecond, time.Second
	stopped := o.StartWorker(WorkerSpec{Name: "stopped", Persistent: true, Labels: q, Command: h.WrapperCommand(),
		WorkerTOML: "drain_timeout = \"" + drainTimeout.String() + "\"\n", CancelGrace: grace.String()})
	on := func(pool map[string]string) map[string]any { return map[string]any{"worker_labels": pool} }
	_, long := h.Submit(trainFor(8), on(p))
	_, stopLong := h.Submit(trainFor(6), on(q))
	for _, id := range []string{long, stopLong} {
		Eventually(t, 20*time.Second, "job "+id+" training", func() bool { return len(JobProcs(id)) > 0 })
	}

	// Admin drain.
	h.Fault("admin drains worker %s while it runs %s (8 s)", admin.ID, long)
	if st, m := o.Do("POST", "/api/admin/workers/"+admin.ID+"/drain", nil); st != 200 {
		t.Fatalf("drain: %d %v", st, m)
	}
	_, waiting := h.Submit(trainFor(0.3), on(p))
	// Signal stop on the other worker meanwhile.
	h.Fault("SIGTERM (systemctl stop) worker %s while it runs %s (6 s; drain_timeout %s)", stopped.ID, stopLong, drainTimeout)
	stopped.P.Signal(syscall.SIGTERM)
	signalled := time.Now()
	// The worker tells the orchestrator it drains (its heartbeat says so,
	// sent at once): from then on nothing is dispatched to it.
	var drainSeen time.Duration
	Eventually(t, 5*time.Second, "the stopping worker shown draining", func() bool {
		drainSeen = time.Since(signalled)
		return o.Worker(stopped.ID)["status"] == "draining"
	})
	_, queuedQ := h.Submit(trainFor(0.3), on(q))

	beats := map[string]bool{}
	var exitCode int
	var exitedAfter time.Duration
	for o.Job(long)["status"] != "completed" {
		w := o.Worker(admin.ID)
		if st := w["status"]; st != "draining" || w["connected"] != true {
			t.Fatalf("the drained worker is %v (connected %v) while its job runs", st, w["connected"])
		}
		if hb, _ := w["last_heartbeat"].(string); hb != "" {
			beats[hb] = true
		}
		if st := o.Job(waiting)["status"]; st != "queued" {
			t.Fatalf("a job for the drained worker's pool is %v, want queued", st)
		}
		if exitedAfter == 0 {
			if code, ok := stopped.P.Exited(0); ok {
				exitCode, exitedAfter = code, time.Since(signalled)
			} else if st := o.Job(queuedQ)["status"]; st != "queued" {
				t.Fatalf("a job submitted after the stop signal is %v on the stopping worker", st)
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(beats) < 5 {
		t.Errorf("only %d distinct heartbeats seen while the drained worker ran its 8 s job", len(beats))
	}
	Eventually(t, 5*time.Second, "the drained worker idle and still draining", func() bool {
		w := o.Worker(admin.ID)
		return w["status"] == "draining" && w["connected"] == true && w["current_job_id"] == nil
	})
	time.Sleep(500 * time.Millisecond) // a drained worker must keep the queued job waiting
	if st := o.Job(waiting)["status"]; st != "queued" {
		t.Fatalf("after its job ended the drained worker took %v", st)
	}
	h.Fault("admin resumes worker %s", admin.ID)
	if st, m := o.Do("POST", "/api/admin/workers/"+admin.ID+"/resume", nil); st != 200 {
		t.Fatalf("resume: %d %v", st, m)
	}

	if exitedAfter == 0 {
		code, ok := stopped.P.Exited(drainTimeout + grace + 10*time.Second)
		if !ok {
			t.Fatalf("the stopped worker did not exit after its drain timeout")
		}
		exitCode, exitedAfter = code, time.Since(signalled)
	}
	if exitCode != 0 {
		t.Errorf("the stopped worker exited %d, want 0", exitCode)
	}
	if exitedAfter < drainTimeout || exitedAfter > drainTimeout+grace+5*time.Second {
		t.Errorf("the stopped worker exited %s after SIGTERM, want between drain_timeout %s and + grace %s + 5 s", exitedAfter.Round(time.Millisecond), drainTimeout, grace)
	}
	if !strings.Contains(stopped.P.Output(), "drain_timeout") {
		t.Errorf("the stopped worker did not say its drain timed out")
	}
	if st := o.Job(stopLong)["status"]; st != "queued" {
		t.Errorf("the job stopped at the drain timeout is %v, want queued (requeued)", st)
	}
	h.Fault("a rescuer joins pool q")
	o.StartWorker(WorkerSpec{Name: "rescuer", Persistent: true, Labels: q, Command: h.WrapperCommand(), NoWait: true})
	h.WaitAllTerminal(90 * time.Second)
	h.Finish()
	sum := h.Check(Expect{MaxRequeues: 1, Statuses: []string{"completed"}})
	if at := Attempts(h.Final[stopLong]); len(at) != 2 || at[0]["worker_id"] != stopped.ID || h.Final[stopLong]["retries_used"] != float64(0) {
		t.Errorf("the stopped worker's job: attempts %v, retries_used %v; want 1 on the stopped worker, then another that spent no retry", at, h.Final[stopLong]["retries_used"])
	}
	if at := Attempts(h.Final[long]); len(at) != 1 {
		t.Errorf("the drained worker's job ran %d attempts, want 1", len(at))
	}
	if sum.Withdrawn != 0 {
		t.Errorf("%d withdrawals: a job was dispatched to a draining worker", sum.Withdrawn)
	}
	t.Logf("RESULT %s: admin drain: %d heartbeats during the 8 s job, no new job taken, drained until resumed; SIGTERM: shown draining %s after it, exited %d after %s (drain_timeout %s, grace %s), its job requeued once; %s",
		t.Name(), len(beats), drainSeen.Round(time.Millisecond), exitCode, exitedAfter.Round(time.Millisecond), drainTimeout, grace, sum)
}

// An admin stops a worker on purpose, with the stop signal twice (the first
// drains, the second stops now): the job it runs is requeued without
// spending a retry, so a job allowed none runs again on another worker and
// completes.
func TestStoppingAWorkerTwiceSpendsNoRetry(t *testing.T) {
	o := StartOrchestratorWith(t, OrchOptions{Metrics: true})
	h := NewHistory(t, o)
	a := o.StartWorker(WorkerSpec{Name: "a", Persistent: true, Command: h.WrapperCommand(), CancelGrace: "2s"})
	// Attempt 1 waits after step 3 until it is stopped; the retry runs
	// through.
	_, id := h.Submit(map[string]any{"steps": 10, "step_seconds": 0.1, "pause_after_step": 3}, map[string]any{"max_retries": 0})
	Eventually(t, 30*time.Second, "job "+id+" paused in training", func() bool { return strings.Contains(o.Logs(id), "pausing after step 3") })
	h.Fault("SIGTERM twice (systemctl stop, then again: stop now) worker a while it runs %s (max_retries 0)", id)
	a.P.Signal(syscall.SIGTERM)
	Eventually(t, 10*time.Second, "worker a shown draining", func() bool { return o.Worker(a.ID)["status"] == "draining" })
	a.P.Signal(syscall.SIGTERM)
	if code, ok := a.P.Exited(30 * time.Second); !ok || code != 0 {
		t.Fatalf("worker a exited %d (exited: %v) after the second signal, want 0", code, ok)
	}
	if j := o.Job(id); j["status"] != "queued" || j["retries_used"] != float64(0) {
		t.Fatalf("after its worker was stopped the job is %v with %v retries used; want queued with none", j["status"], j["retries_used"])
	}
	h.Fault("worker b joins")
	b := o.StartWorker(WorkerSpec{Name: "b", Persistent: true, Command: h.WrapperCommand(), NoWait: true})
	h.WaitAllTerminal(60 * time.Second)
	h.Finish()
	sum := h.Check(Expect{MaxRequeues: 1, Statuses: []string{"completed"}})
	at := Attempts(h.Final[id])
	if len(at) != 2 || at[0]["worker_id"] != a.ID || at[1]["worker_id"] != b.ID || at[0]["outcome"] != "worker_lost" {
		t.Fatalf("attempts %v: want attempt 1 on a (worker_lost), attempt 2 on b", at)
	}
	if msg, _ := at[0]["error"].(string); !strings.Contains(msg, "stopped on purpose") || !strings.Contains(msg, "without spending a retry") {
		t.Errorf("attempt 1's history: %q", msg)
	}
	t.Logf("RESULT %s: %s; the job stopped by the second SIGTERM was requeued with no retry spent and completed on b", t.Name(), sum)
}
