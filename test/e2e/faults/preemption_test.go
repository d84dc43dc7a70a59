package faults

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/pgtest"
	. "github.com/simpletuner/simpletuner-orchestration/test/e2e/e2etest"
)

// Preemption with the real daemons: two teams with equal shares of a fleet
// of two one-GPU workers (static GPU backend). Team a runs a holder job and
// then the victim (started last, so the one preempted); team b submits one
// job, which is under its share and stops the victim. The holder's first
// attempt waits after step 1 until the test cancels it, so the victim's
// retry runs on the worker b's job leaves, however slow the machine.

// minRuntime is the scenarios' [jobs] min_runtime (it must be more than 0).
const minRuntime = 100 * time.Millisecond

// preemptOptions turns preemption on once a job ran minRuntime and
// configures teams a and b with equal shares (the admin token's default
// team with almost none).
func preemptOptions(o OrchOptions) OrchOptions {
	o.JobsTOML += fmt.Sprintf("preemption = \"on\"\nmin_runtime = \"%s\"\n", minRuntime)
	o.ExtraTOML += "[[teams]]\nname = \"a\"\nshare = 1\n[[teams]]\nname = \"b\"\nshare = 1\n" +
		"[[teams]]\nname = \"default\"\nshare = 0.001\n"
	return o
}

// preemptScene is a running scenario: the jobs and whose they are.
type preemptScene struct {
	o                    *Orch
	h                    *History
	workers              map[string]*Wrk   // by worker id
	proxies              map[string]*Proxy // by worker id, where spec.URL is "proxy"
	holder, victim, late string
	tokB                 string
}

// startPreemptScene starts two one-GPU workers like spec (named p0, p1;
// URL "proxy": each through a proxy of its own), runs team a's holder and
// then victimCfg, both whole-worker jobs, and waits until both run. Team
// b's job is not submitted yet.
func startPreemptScene(t *testing.T, o *Orch, spec WorkerSpec, victimCfg map[string]any) *preemptScene {
	t.Helper()
	h := NewHistory(t, o)
	s := &preemptScene{o: o, h: h, workers: map[string]*Wrk{}, proxies: map[string]*Proxy{}}
	tokA := o.TeamToken("a")
	s.tokB = o.TeamToken("b")
	for i := range 2 {
		ws := spec
		ws.Name, ws.Persistent, ws.StaticGPUs, ws.Command = fmt.Sprintf("p%d", i), true, 1, h.ExecWrapperCommand()
		var px *Proxy
		if spec.URL == "proxy" {
			px = NewProxy(t, strings.TrimPrefix(o.URL, "http://"))
			ws.URL = px.URL()
		}
		w := o.StartWorker(ws)
		s.workers[w.ID], s.proxies[w.ID] = w, px
	}
	_, s.holder = h.SubmitAs(tokA, map[string]any{"steps": 100, "step_seconds": 0.1, "pause_after_step": 1}, nil)
	o.WaitJob(s.holder, "running", 20*time.Second)
	// Started after the holder: the most recently started, so the victim.
	_, s.victim = h.SubmitAs(tokA, victimCfg, nil)
	o.WaitJob(s.victim, "running", 20*time.Second)
	// Until the victim has run min_runtime only the holder may be
	// preempted: a loaded machine once got team b's job in before that.
	time.Sleep(minRuntime)
	return s
}

// submitLate submits team b's job, which preempts the victim.
func (s *preemptScene) submitLate(t *testing.T) {
	t.Helper()
	st := 0
	if st, s.late = s.h.SubmitAs(s.tokB, trainFor(1), nil); st != 201 {
		t.Fatalf("team b's submit: %d", st)
	}
}

// waitStatus polls the job every 5 ms (a canceling stretch can be short)
// and returns the job once it has status.
func (s *preemptScene) waitStatus(t *testing.T, id, status string, timeout time.Duration) map[string]any {
	t.Helper()
	var j map[string]any
	for deadline := time.Now().Add(timeout); ; time.Sleep(5 * time.Millisecond) {
		if j = s.o.Job(id); j != nil && j["status"] == status {
			return j
		}
		if time.Now().After(deadline) {
			s.h.Finish()
			s.h.Dump()
			t.Fatalf("job %s not %s within %s; it is %v", id, status, timeout, j["status"])
		}
	}
}

// finish waits for the late job and the victim to complete, cancels the
// holder, and checks the whole history; the holder must end cancelled,
// everything else completed.
func (s *preemptScene) finish(t *testing.T, timeout time.Duration) Summary {
	t.Helper()
	s.o.WaitJob(s.late, "completed", timeout)
	s.o.WaitJob(s.victim, "completed", timeout)
	if st, _ := s.o.Do("POST", "/api/queue/"+s.holder+"/cancel", nil); st != 200 {
		t.Fatalf("cancel the holder: %d", st)
	}
	s.h.WaitAllTerminal(30 * time.Second)
	s.h.Finish()
	sum := s.h.Check(Expect{MaxRequeues: -1, Statuses: []string{"completed", "cancelled"}})
	if st := s.h.Final[s.holder]["status"]; st != "cancelled" || len(Attempts(s.h.Final[s.holder])) != 1 {
		t.Errorf("holder %s ended %v after %d attempts, want cancelled after 1 (it was never to be preempted)",
			s.holder, st, len(Attempts(s.h.Final[s.holder])))
	}
	return sum
}

// transitions returns the audit's job.transition details of job id.
func (s *preemptScene) transitions(id string) []map[string]any {
	var out []map[string]any
	for _, r := range s.h.Audit {
		if r.Action != "job.transition" || r.TargetID != id {
			continue
		}
		var d map[string]any
		_ = json.Unmarshal(r.Details, &d)
		out = append(out, d)
	}
	return out
}

// checkPreemptedOnce checks the victim's record: one preemption (cause
// preempt, for the late job), one requeue with outcome preempted and no
// retry spent, then one attempt that completed; and that no other job was
// preempted. It returns the cause of the requeue (report, loss or deadline).
func (s *preemptScene) checkPreemptedOnce(t *testing.T) string {
	t.Helper()
	var preempts, requeues []map[string]any
	for _, id := range s.h.Jobs() {
		for _, d := range s.transitions(id) {
			if d["cause"] == "preempt" {
				if id != s.victim {
					t.Errorf("job %s was preempted too (%v); only the victim %s should be", id, d, s.victim)
				}
				preempts = append(preempts, d)
			}
			if id == s.victim && d["to"] == "queued" && d["from"] != "queued" {
				requeues = append(requeues, d)
			}
		}
	}
	if len(preempts) != 1 || preempts[0]["preempted_for"] != s.late {
		t.Errorf("preemptions %v: want one, of the victim %s for team b's job %s", preempts, s.victim, s.late)
	}
	cause := ""
	if len(requeues) != 1 || requeues[0]["outcome"] != "preempted" || requeues[0]["retry_spent"] == true {
		t.Errorf("victim %s requeued %d times %v: want once, outcome preempted, no retry spent", s.victim, len(requeues), requeues)
	} else {
		cause, _ = requeues[0]["cause"].(string)
	}
	j := s.h.Final[s.victim]
	at := Attempts(j)
	if len(at) != 2 || at[0]["outcome"] != "preempted" || at[1]["outcome"] != "completed" || j["retries_used"] != float64(0) {
		t.Errorf("victim %s: attempts %v retries_used %v; want attempt 1 preempted, attempt 2 completed, no retry used",
			s.victim, at, j["retries_used"])
	}
	if j := s.h.Final[s.late]; j["retries_used"] != float64(0) {
		t.Errorf("team b's job %s used %v retries", s.late, j["retries_used"])
	}
	return cause
}

// kill -9 of the orchestrator while a preemption is under way, at one of
// several points, then a restart: nothing is lost, nothing runs twice (no
// attempt of a job beside another, no GPU held by two live attempts: the
// late job must not start on the victim's GPU while the victim still runs),
// and the victim is requeued exactly once, as preempted, at no retry.
func TestPreemptionOrchestratorKill9(t *testing.T) {
	fullOnly(t)
	for _, store := range []string{"sqlite", "postgres"} {
		for _, point := range []string{"canceling", "past-cancel-deadline", "requeued"} {
			t.Run(store+"/"+point, func(t *testing.T) {
				url := ""
				if store == "postgres" {
					url = pgtest.Start(t)
				}
				testPreemptionOrchestratorKill9(t, url, point)
			})
		}
	}
}

func testPreemptionOrchestratorKill9(t *testing.T, dbURL, point string) {
	// The workers ride out the orchestrator's absence (as in the kill -9 loop).
	o := StartOrchestratorWith(t, preemptOptions(OrchOptions{Metrics: true, DBURL: dbURL, HeartbeatTimeout: "30s"}))
	// The victim ignores SIGTERM: its worker kills it at the end of the
	// 1 s cancel grace, so the preemption stays under way long enough to
	// kill the orchestrator inside it.
	s := startPreemptScene(t, o, WorkerSpec{SelfFenceAfter: "20s"},
		map[string]any{"steps": 30, "step_seconds": 0.1, "pause_after_step": 3, "ignore_sigterm": true})
	s.submitLate(t)
	j := s.waitStatus(t, s.victim, "canceling", 20*time.Second)
	preemptedAt := time.Now()
	vw := s.workers[fmt.Sprint(j["worker_id"])]
	switch point {
	case "canceling": // right after the preemption: the worker's report comes while the orchestrator is down or restarting
		s.h.Fault("kill -9 orchestrator: victim %s canceling (preempted for %s)", s.victim, s.late)
		o.P.Kill9()
	case "past-cancel-deadline": // down until grace + cancel_report_timeout (1 s + 2 s) after the preemption have passed
		s.h.Fault("kill -9 orchestrator: victim %s canceling; down past its cancel deadline", s.victim)
		o.P.Kill9()
		time.Sleep(time.Until(preemptedAt.Add(3500 * time.Millisecond)))
	case "requeued": // the victim is back in the queue: the freed worker is being handed to the late job
		s.waitStatus(t, s.victim, "queued", 20*time.Second)
		s.h.Fault("kill -9 orchestrator: victim %s requeued, late job %s %v", s.victim, s.late, o.Job(s.late)["status"])
		o.P.Kill9()
	}
	// A kill right after the preemption's commit can land before the
	// job_cancel went out: then the restarted orchestrator must stop it.
	cancelSeen := strings.Contains(vw.P.Output(), "cancelled by the orchestrator")
	o.Restart()
	s.h.Fault("orchestrator restarted")
	sum := s.finish(t, 60*time.Second)
	cause := s.checkPreemptedOnce(t)
	var late []string
	for _, a := range Attempts(s.h.Final[s.late]) {
		late = append(late, fmt.Sprintf("%v on %v", a["outcome"], a["worker_id"]))
	}
	t.Logf("RESULT %s: %s; killed at %s (victim preempted on %s (%s), job_cancel received before the restart: %v, requeued by %s); team b's job's attempts: %v",
		t.Name(), sum, point, vw.Spec.Name, vw.ID, cancelSeen, cause, late)
}

// kill -9 of the victim's workerd during its cancel grace (its trainer
// ignores SIGTERM, so the stop is still under way): the job is requeued
// once, as preempted, at no retry, and completes later. The workerd comes
// back either after the requeue or at once, registering again before its
// loss is noticed (the registration then drops the attempt it no longer
// runs).
func TestPreemptedJobsWorkerKilledDuringGrace(t *testing.T) {
	fullOnly(t)
	for _, back := range []string{"after-requeue", "at-once"} {
		t.Run(back, func(t *testing.T) { testPreemptedJobsWorkerKilledDuringGrace(t, back == "at-once") })
	}
}

func testPreemptedJobsWorkerKilledDuringGrace(t *testing.T, atOnce bool) {
	o := StartOrchestratorWith(t, preemptOptions(OrchOptions{Metrics: true}))
	s := startPreemptScene(t, o, WorkerSpec{},
		map[string]any{"steps": 30, "step_seconds": 0.1, "pause_after_step": 3, "ignore_sigterm": true})
	s.submitLate(t)
	j := s.waitStatus(t, s.victim, "canceling", 20*time.Second)
	w := s.workers[fmt.Sprint(j["worker_id"])]
	if len(JobProcs(s.victim)) == 0 {
		t.Fatalf("the victim's processes are gone before the kill: the grace was over already")
	}
	s.h.Fault("kill -9 worker %s during the cancel grace of preempted %s", w.Spec.Name, s.victim)
	killedAt := time.Now()
	w.P.Kill9()
	if atOnce {
		// Not waiting for idle: the worker may take b's job at once.
		w.Spec.NoWait = true
		w.Restart()
		s.h.Fault("worker %s restarted", w.Spec.Name)
	}
	j = s.waitStatus(t, s.victim, "queued", 20*time.Second)
	requeuedIn := time.Since(killedAt)
	if at := Attempts(j); len(at) != 1 || at[0]["outcome"] != "preempted" || j["retries_used"] != float64(0) {
		t.Fatalf("after the worker's death: attempts %v retries_used %v; want one attempt preempted, no retry used", at, j["retries_used"])
	}
	if !atOnce {
		w.Restart()
		s.h.Fault("worker %s restarted", w.Spec.Name)
	}
	sum := s.finish(t, 60*time.Second)
	cause := s.checkPreemptedOnce(t)
	gone := "never seen to exit"
	for _, e := range s.h.Events() {
		if e.Kind == "proc_exit" && e.Job == s.victim && e.Attempt == "1" {
			gone = fmt.Sprintf("%.2f s after the kill", e.At.Sub(killedAt).Seconds())
		}
	}
	at := Attempts(s.h.Final[s.victim])
	t.Logf("RESULT %s: %s; attempt 1's processes gone %s; requeued by %s %.2f s after the kill (%v); the victim's retry ran on %v",
		t.Name(), sum, gone, cause, requeuedIn.Seconds(), at[0]["error"], at[1]["worker_id"])
}

// The victim's worker cut off (a black-holing proxy: no job_cancel, no
// heartbeat) from just before the preemption until after its cancel
// deadline, as when the orchestrator dies between the preemption's commit
// and the job_cancel: the deadline requeues the victim and frees the worker
// in the store while the worker still runs the fenced attempt. After the
// heal the worker registers again listing that attempt, which it then
// stops (1 s grace), and b's job goes to it: b's job must not start beside
// the fenced attempt (one GPU, two live attempts), and must not wait out an
// ack deadline either.
//
// The orchestrator dispatches b's job as soon as the registration abandons
// the fenced attempt; workerd, still stopping it, holds the job until the
// stop is done. (It used to refuse it without a word, and b's job waited
// out the whole ack_timeout: 6.9–7.8 s after the heal here.)
func TestPreemptionVictimCutOff(t *testing.T) {
	fullOnly(t)
	const ackTimeout = 6 * time.Second
	// Neither side gives up on the other during the cut (4–5 s); the ack
	// timeout, longer than the e2e default, tells waiting it out from
	// waiting for the fenced attempt's 1 s grace.
	o := StartOrchestratorWith(t, preemptOptions(OrchOptions{Metrics: true, HeartbeatTimeout: "30s", AckTimeout: ackTimeout.String()}))
	s := startPreemptScene(t, o, WorkerSpec{URL: "proxy", SelfFenceAfter: "20s"},
		map[string]any{"steps": 30, "step_seconds": 0.1, "pause_after_step": 3, "ignore_sigterm": true})
	vid := fmt.Sprint(o.Job(s.victim)["worker_id"])
	vw := s.workers[vid]
	s.h.Fault("cut worker %s off (it runs the victim %s)", vw.Spec.Name, s.victim)
	s.proxies[vid].SetCut(true)
	s.submitLate(t)
	s.waitStatus(t, s.victim, "canceling", 20*time.Second)
	s.waitStatus(t, s.victim, "queued", 20*time.Second)
	if len(JobProcs(s.victim)) == 0 {
		t.Fatalf("the victim's attempt 1 ended during the cut: the worker heard of the preemption")
	}
	// The requeue closed the worker's stream: b's job waits for it to
	// register again, which it does, listing the fenced attempt, at the heal.
	s.h.Fault("heal worker %s's network (b's job %v)", vw.Spec.Name, o.Job(s.late)["status"])
	healed := time.Now()
	s.proxies[vid].SetCut(false)
	// Timed here: the API's times are whole seconds.
	s.waitStatus(t, s.late, "running", 30*time.Second)
	startedIn := time.Since(healed)
	sum := s.finish(t, 60*time.Second)
	cause := s.checkPreemptedOnce(t)
	var late []string
	for _, a := range Attempts(s.h.Final[s.late]) {
		late = append(late, fmt.Sprintf("%v on %v (%v)", a["outcome"], a["worker_id"], a["error"]))
	}
	t.Logf("RESULT %s: %s; victim on %s (%s) requeued by %s during the cut; team b's job running %.2f s after the heal; its attempts: %v",
		t.Name(), sum, vw.Spec.Name, vid, cause, startedIn.Seconds(), late)
	// Without the bug: the worker registers again within its reconnect
	// back-off, stops the fenced attempt within 1 s, then takes b's job.
	if startedIn >= ackTimeout/2 {
		t.Errorf("team b's job running only %.2f s after the heal: it waited out the %s ack deadline on the worker, which refused it while it stopped the fenced attempt (attempts: %v)",
			startedIn.Seconds(), ackTimeout, late)
	}
}

// The victim kept checkpoint-20 through the orchestrator before it was
// preempted (its attempt 1 waits after step 20): its next attempt resumes
// from it, first step 21.
func TestPreemptedJobResumesFromCheckpoint(t *testing.T) {
	const steps, k = 40, 5
	o := StartOrchestratorWith(t, preemptOptions(OrchOptions{Metrics: true}))
	s := startPreemptScene(t, o, WorkerSpec{JobTOML: checkpointTOML("0")},
		map[string]any{"steps": steps, "step_seconds": 0.1, "checkpointing_steps": k, "output_dir": "out", "pause_after_step": 20})
	Eventually(t, 30*time.Second, "checkpoint-20 kept", func() bool { return keptStep(o, s.victim) == 20 })
	s.submitLate(t)
	sum := s.finish(t, 60*time.Second)
	s.checkPreemptedOnce(t)
	log := o.Logs(s.victim)
	_, resumed, first, total := resumeOf(t, log)
	if resumed != 20 || first != 21 {
		t.Errorf("the retry resumed at %d (first step %d), want checkpoint-20, kept before the preemption", resumed, first)
	}
	if total > steps+k {
		t.Errorf("%d steps trained in all for %d, more than steps + checkpointing_steps (%d)", total, steps, steps+k)
	}
	if !strings.Contains(log, "simpletuner-workerd: resuming from checkpoint-20") {
		t.Errorf("no resume line from workerd in the job's log")
	}
	t.Logf("RESULT %s: %s; preempted after checkpoint-20 was kept; the retry resumed at step %d; %d steps trained in all for %d",
		t.Name(), sum, resumed, total, steps)
}
