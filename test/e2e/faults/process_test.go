package faults

import (
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	. "github.com/simpletuner/simpletuner-orchestration/test/e2e/e2etest"
)

// kill -9 a worker while it trains: the job is requeued once (worker_lost)
// and completes on the other worker; nothing ran twice at once.
func TestKill9WorkerMidJob(t *testing.T) {
	o := StartOrchestratorWith(t, OrchOptions{Metrics: true})
	h := NewHistory(t, o)
	cmd := h.ExecWrapperCommand()
	a := o.StartWorker(WorkerSpec{Name: "a", Persistent: true, Command: cmd})
	o.StartWorker(WorkerSpec{Name: "b", Persistent: true, Command: cmd})
	base := takeBaseline(o)
	for range 4 {
		h.Submit(trainFor(1.5), nil)
	}
	victim := ""
	Eventually(t, 20*time.Second, "a job training on worker a", func() bool {
		for _, id := range h.Jobs() {
			if j := o.Job(id); j["worker_id"] == a.ID && j["status"] == "running" && len(JobProcs(id)) > 0 {
				victim = id
				return true
			}
		}
		return false
	})
	h.Fault("kill -9 worker a while it runs %s", victim)
	a.P.Kill9()
	h.WaitAllTerminal(60 * time.Second)
	a.Restart()
	h.Finish()
	sum := h.Check(Expect{MaxRequeues: -1, Statuses: []string{"completed"}})
	at := Attempts(h.Final[victim])
	if len(at) < 2 || at[0]["outcome"] != "worker_lost" || at[0]["worker_id"] != a.ID || h.Final[victim]["retries_used"] != float64(1) {
		t.Errorf("victim %s: attempts %v retries_used %v, want attempt 1 worker_lost on a then one retry", victim, at, h.Final[victim]["retries_used"])
	}
	if sum.RetriesSpent != 1 {
		t.Errorf("%d retries spent, want 1 (only the victim)", sum.RetriesSpent)
	}
	base.check(t, o)
	t.Logf("RESULT %s: %s", t.Name(), sum)
}

// kill -9 only the training process: the worker survives, reports the job
// failed (a trainer crash is terminal, no retry), and runs the next job.
func TestKill9TrainerOnly(t *testing.T) {
	o := StartOrchestratorWith(t, OrchOptions{Metrics: true})
	h := NewHistory(t, o)
	w := o.StartWorker(WorkerSpec{Name: "w", Persistent: true, Command: h.WrapperCommand()})
	base := takeBaseline(o)
	_, victim := h.Submit(trainFor(5), nil)
	pid := 0
	Eventually(t, 20*time.Second, "the trainer running", func() bool {
		for _, p := range AllJobProcs() {
			if p.Job == victim && p.Comm == "demo-trainer" {
				pid = p.Pid
				return true
			}
		}
		return false
	})
	h.Fault("kill -9 trainer pid %d of %s", pid, victim)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	o.WaitJob(victim, "failed", 20*time.Second)
	_, next := h.Submit(trainFor(0.3), nil)
	o.WaitJob(next, "completed", 20*time.Second)
	h.WaitAllTerminal(10 * time.Second)
	h.Finish()
	sum := h.Check(Expect{MaxRequeues: 0})
	if at := Attempts(h.Final[victim]); len(at) != 1 || at[0]["outcome"] != "failed" {
		t.Errorf("victim attempts %v, want one attempt that failed", at)
	}
	if Attempts(h.Final[next])[0]["worker_id"] != w.ID || w.P.Cmd.ProcessState != nil {
		t.Errorf("the worker did not survive to run the next job")
	}
	if h.Count("wrap_exit") < 2 {
		t.Errorf("the wrapper did not record the trainer's exits: %d", h.Count("wrap_exit"))
	}
	base.check(t, o)
	t.Logf("RESULT %s: %s", t.Name(), sum)
}

// A trainer with a child process (the demo trainer's ignore_sigterm mode
// starts one, as real trainers start dataloader workers) and kill -9 of the
// worker: the child must not outlive the attempt and run beside the retry.
func TestKill9WorkerTrainerWithChild(t *testing.T) {
	fullOnly(t)
	o := StartOrchestratorWith(t, OrchOptions{Metrics: true})
	h := NewHistory(t, o)
	a := o.StartWorker(WorkerSpec{Name: "a", Persistent: true, Labels: map[string]string{"pool": "x"}})
	_, id := h.Submit(map[string]any{"steps": 30, "step_seconds": 0.1, "ignore_sigterm": true}, map[string]any{"worker_labels": map[string]string{"pool": "x"}})
	Eventually(t, 20*time.Second, "trainer and child running", func() bool { return len(JobProcs(id)) >= 2 })
	h.Fault("kill -9 worker a")
	a.P.Kill9()
	o.StartWorker(WorkerSpec{Name: "b", Persistent: true, Labels: map[string]string{"pool": "x"}})
	h.WaitAllTerminal(60 * time.Second)
	h.Finish()
	sum := h.Check(Expect{MaxRequeues: -1, Statuses: []string{"completed"}})
	t.Logf("RESULT %s: %s", t.Name(), sum)
	for _, p := range AllJobProcs() {
		if p.Job == id {
			_ = syscall.Kill(p.Pid, syscall.SIGKILL) // do not leave it behind
		}
	}
}

// Many short jobs while every core is busy: the moment between a trainer's
// exit and the acknowledgement of its report is stretched by the load, and
// heartbeats keep coming during it. A finished job must never be taken for
// lost there and run a second time: zero requeues.
func TestShortJobsUnderCPULoad(t *testing.T) {
	jobs := 40
	if isFull() {
		jobs = 300
	}
	o := StartOrchestratorWith(t, OrchOptions{Metrics: true, HeartbeatInterval: "20ms", HeartbeatTimeout: "5s"})
	h := NewHistory(t, o)
	for i := range 4 {
		o.StartWorker(WorkerSpec{Name: fmt.Sprintf("w%d", i), Persistent: true, Command: h.WrapperCommand(), SelfFenceAfter: "4s"})
	}
	BurnCPU(t, 2*runtime.NumCPU())
	// A first round lets every worker open the connections it keeps alive for
	// reports running beside heartbeats; the baseline comes after it.
	for range 8 {
		h.Submit(map[string]any{"steps": 1, "step_seconds": 0.01}, nil)
	}
	h.WaitAllTerminal(30 * time.Second)
	base := takeBaseline(o)
	for range jobs {
		h.Submit(map[string]any{"steps": 1, "step_seconds": 0.01}, nil)
	}
	h.WaitAllTerminal(time.Duration(jobs) * time.Second)
	h.Finish()
	sum := h.Check(Expect{MaxRequeues: 0, Statuses: []string{"completed"}})
	base.check(t, o)
	t.Logf("RESULT %s: %s", t.Name(), sum)
}
