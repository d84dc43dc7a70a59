package storetest

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/lifecycle"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

var transitionTests = []test{
	{"TransitionCompareAndSet", testTransitionCAS},
	{"TransitionTerminalIsFinal", testTransitionTerminalIsFinal},
	{"TransitionAck", testTransitionAck},
	{"TransitionEndAttemptFreesWorker", testTransitionEndAttempt},
	{"TransitionDrainingWorkerStaysDraining", testTransitionDraining},
	{"TransitionLeavesWorkerThatMovedOn", testTransitionWorkerMovedOn},
	{"TransitionRequeue", testTransitionRequeue},
	{"TransitionFields", testTransitionFields},
	{"TransitionAuditIsAtomic", testTransitionAuditAtomic},
	{"TransitionStoresUsage", testTransitionUsage},
}

// dispatched returns a worker and the job it was just given.
func dispatched(t *testing.T, s store.Store, mod ...func(*store.Worker)) (store.Worker, store.Job) {
	t.Helper()
	w := newWorker(t, s, mod...)
	j := newJob(t, s)
	j, _ = claim(t, s, w.ID)
	if j.WorkerID != w.ID {
		t.Fatalf("claimed %+v for %s", j, w.ID)
	}
	return getWorker(t, s, w.ID), j
}

func testTransitionCAS(t *testing.T, s store.Store) {
	w, j := dispatched(t, s)
	other := newWorker(t, s)
	bad := []store.JobTransition{
		{ExpectAttempt: 1, From: protocol.JobRunning, Step: lifecycle.Step{To: protocol.JobCompleted}},
		{ExpectAttempt: 2, From: protocol.JobDispatched, Step: lifecycle.Step{To: protocol.JobRunning}},
		{ExpectAttempt: 0, From: protocol.JobDispatched, Step: lifecycle.Step{To: protocol.JobRunning}},
		{ExpectAttempt: 1, ExpectWorker: other.ID, From: protocol.JobDispatched, Step: lifecycle.Step{To: protocol.JobRunning}},
		{ExpectAttempt: 1, Step: lifecycle.Step{To: protocol.JobRunning}}, // no From: nothing matches
	}
	for i, tr := range bad {
		tr.JobID, tr.Now, tr.Ack, tr.Audit, tr.By = j.ID, at(time.Hour), true, rec("job.transition"), lifecycle.Report
		tr.EndAttempt = protocol.OutcomeFailed
		_, err := s.TransitionJob(t.Context(), tr)
		wantErr(t, err, store.ErrConflict, "mismatched transition "+string(rune('0'+i)))
	}
	equal(t, getJob(t, s, j.ID), j, "job after refused transitions")
	equal(t, getWorker(t, s, w.ID), w, "worker after refused transitions")
	if as := attempts(t, s, j.ID); as[0].EndedAt != nil || as[0].AckedAt != nil {
		t.Fatalf("attempt changed by refused transitions: %+v", as[0])
	}
	if n := len(chain(t, s)); n != 0 {
		t.Fatalf("refused transitions appended %d audit records", n)
	}
	// The matching one applies.
	nj, err := s.TransitionJob(t.Context(), store.JobTransition{JobID: j.ID, ExpectAttempt: 1, ExpectWorker: w.ID,
		From: protocol.JobDispatched, Step: lifecycle.Step{To: protocol.JobRunning, By: lifecycle.Report}, Now: at(time.Hour)})
	noErr(t, err, "matching transition")
	equal(t, nj.Status, protocol.JobRunning, "status")
}

func testTransitionTerminalIsFinal(t *testing.T, s store.Store) {
	for _, end := range []protocol.JobStatus{protocol.JobCompleted, protocol.JobFailed, protocol.JobCancelled} {
		_, j := dispatched(t, s)
		j = finish(t, s, j, end)
		for _, to := range []protocol.JobStatus{protocol.JobQueued, protocol.JobRunning, protocol.JobCompleted, protocol.JobFailed, end} {
			_, err := s.TransitionJob(t.Context(), store.JobTransition{JobID: j.ID, ExpectAttempt: j.Attempt,
				From: end, Step: lifecycle.Step{To: to, By: lifecycle.Report, Error: ptr("late")}, Now: at(2 * time.Hour)})
			wantErr(t, err, store.ErrConflict, string(end)+" → "+string(to))
		}
		equal(t, getJob(t, s, j.ID), j, "terminal job")
	}
}

func testTransitionAck(t *testing.T, s store.Store) {
	w, j := dispatched(t, s)
	nj := transition(t, s, j, store.JobTransition{ExpectWorker: w.ID, Step: lifecycle.Step{To: protocol.JobRunning, By: lifecycle.Report, Ack: true}, Now: at(time.Minute)})
	want := j
	want.Status, want.StartedAt, want.UpdatedAt = protocol.JobRunning, ptr(at(time.Minute)), at(time.Minute)
	equal(t, nj, want, "acknowledged job")
	as := attempts(t, s, j.ID)
	if as[0].AckedAt == nil || !as[0].AckedAt.Equal(at(time.Minute)) || as[0].EndedAt != nil {
		t.Fatalf("attempt after ack: %+v", as[0])
	}
	if gw := getWorker(t, s, w.ID); gw.Status != protocol.WorkerBusy || gw.CurrentJobID != j.ID {
		t.Fatalf("ack must not free the worker: %+v", gw)
	}
}

func testTransitionEndAttempt(t *testing.T, s store.Store) {
	w, j := dispatched(t, s)
	j = transition(t, s, j, store.JobTransition{Step: lifecycle.Step{To: protocol.JobRunning, By: lifecycle.Report, Ack: true}, Now: at(time.Minute)})
	nj := transition(t, s, j, store.JobTransition{Step: lifecycle.Step{To: protocol.JobFailed, By: lifecycle.Report,
		EndAttempt: protocol.OutcomeFailed, Error: ptr("exit 1")}, Now: at(time.Hour)})
	if nj.Status != protocol.JobFailed || nj.EndedAt == nil || !nj.EndedAt.Equal(at(time.Hour)) ||
		nj.Error != "exit 1" || nj.WorkerID != w.ID || nj.Attempt != 1 {
		t.Fatalf("failed job: %+v", nj)
	}
	as := attempts(t, s, j.ID)
	if as[0].EndedAt == nil || !as[0].EndedAt.Equal(at(time.Hour)) || as[0].Outcome != protocol.OutcomeFailed || as[0].Error != "exit 1" {
		t.Fatalf("ended attempt: %+v", as[0])
	}
	if gw := getWorker(t, s, w.ID); gw.Status != protocol.WorkerIdle || gw.CurrentJobID != "" {
		t.Fatalf("worker after its job ended: status %s job %q", gw.Status, gw.CurrentJobID)
	}
}

func testTransitionDraining(t *testing.T, s store.Store) {
	w, j := dispatched(t, s)
	_, err := s.UpdateWorker(t.Context(), w.ID, func(cur *store.Worker) (*audit.Record, error) {
		cur.Status = protocol.WorkerDraining
		return nil, nil
	})
	noErr(t, err, "UpdateWorker")
	transition(t, s, j, store.JobTransition{Step: lifecycle.Step{To: protocol.JobCompleted, By: lifecycle.Report, EndAttempt: protocol.OutcomeCompleted}})
	if gw := getWorker(t, s, w.ID); gw.Status != protocol.WorkerDraining || gw.CurrentJobID != "" {
		t.Fatalf("draining worker after its job ended: status %s job %q", gw.Status, gw.CurrentJobID)
	}
}

func testTransitionWorkerMovedOn(t *testing.T, s store.Store) {
	// A worker that runs two jobs at once: ending one attempt frees its slot
	// only, and the worker's current job becomes the other.
	w, j := dispatched(t, s, sharing(2))
	newJob(t, s)
	other, _ := claim(t, s, w.ID)
	if gw := getWorker(t, s, w.ID); gw.Status != protocol.WorkerBusy || gw.Running != 2 || gw.CurrentJobID != other.ID {
		t.Fatalf("worker with two jobs: status %s running %d job %q", gw.Status, gw.Running, gw.CurrentJobID)
	}
	transition(t, s, j, store.JobTransition{Step: lifecycle.Step{To: protocol.JobQueued, By: lifecycle.Loss, EndAttempt: protocol.OutcomeWithdrawn}})
	if gw := getWorker(t, s, w.ID); gw.Status != protocol.WorkerPartial || gw.Running != 1 || gw.CurrentJobID != other.ID {
		t.Fatalf("worker after one of its two jobs ended: status %s running %d job %q", gw.Status, gw.Running, gw.CurrentJobID)
	}
}

// sharing makes a worker that runs up to n jobs at once, with n GPUs.
func sharing(n int) func(*store.Worker) {
	return func(w *store.Worker) {
		w.Protocol, w.Capabilities.MaxJobs = 2, n
		w.GPUInfo = store.ReadGPUInfo(json.RawMessage(fmt.Sprintf(`{"count":%d}`, n)))
	}
}

func testTransitionRequeue(t *testing.T, s store.Store) {
	w, j := dispatched(t, s)
	j = transition(t, s, j, store.JobTransition{Step: lifecycle.Step{To: protocol.JobRunning, By: lifecycle.Report, Ack: true}, Now: at(time.Minute)})
	nj := transition(t, s, j, store.JobTransition{ExpectWorker: w.ID, Step: lifecycle.Step{To: protocol.JobQueued, By: lifecycle.Loss,
		EndAttempt: protocol.OutcomeWorkerLost, SpendRetry: true, Error: ptr("lost")}, Now: at(time.Hour)})
	if nj.Status != protocol.JobQueued || nj.WorkerID != "" || nj.AckDeadline != nil || nj.StartedAt != nil ||
		nj.EndedAt != nil || nj.RetriesUsed != 1 || nj.Attempt != 1 || nj.Error != "lost" {
		t.Fatalf("requeued job: %+v", nj)
	}
	as := attempts(t, s, j.ID)
	if as[0].Outcome != protocol.OutcomeWorkerLost || as[0].EndedAt == nil || as[0].WorkerID != w.ID {
		t.Fatalf("lost attempt: %+v", as[0])
	}
	if gw := getWorker(t, s, w.ID); gw.Status != protocol.WorkerIdle || gw.CurrentJobID != "" {
		t.Fatalf("worker after requeue: %+v", gw)
	}
	// A queued job at attempt 1 can be cancelled by CAS on (queued, 1).
	c := transition(t, s, nj, store.JobTransition{Step: lifecycle.Step{To: protocol.JobCancelled, By: lifecycle.Cancel}})
	if c.Status != protocol.JobCancelled || c.EndedAt == nil || c.RetriesUsed != 1 {
		t.Fatalf("cancelled job: %+v", c)
	}
}

func testTransitionFields(t *testing.T, s store.Store) {
	_, j := dispatched(t, s)
	j = transition(t, s, j, store.JobTransition{Step: lifecycle.Step{To: protocol.JobRunning, By: lifecycle.Report, Ack: true},
		Progress: json.RawMessage(`{"step":10,"of":100}`)})
	if string(j.Progress) != `{"step":10,"of":100}` {
		t.Fatalf("progress %s", j.Progress)
	}
	// Unset fields keep their values.
	j = transition(t, s, j, store.JobTransition{Step: lifecycle.Step{To: protocol.JobRunning, By: lifecycle.Report, Error: ptr("warning")}})
	if string(j.Progress) != `{"step":10,"of":100}` || j.Error != "warning" {
		t.Fatalf("after second report: %+v", j)
	}
	deadline := at(3 * time.Hour)
	j = transition(t, s, j, store.JobTransition{Step: lifecycle.Step{To: protocol.JobCanceling, By: lifecycle.Cancel}, CancelDeadline: &deadline})
	if j.CancelDeadline == nil || !j.CancelDeadline.Equal(deadline) || j.Status != protocol.JobCanceling {
		t.Fatalf("canceling job: %+v", j)
	}
	j = transition(t, s, j, store.JobTransition{Step: lifecycle.Step{To: protocol.JobCancelled, By: lifecycle.Report, EndAttempt: protocol.OutcomeCancelled, Error: ptr("")}})
	if j.Error != "" || j.EndedAt == nil {
		t.Fatalf("cancelled job: %+v", j)
	}
	equal(t, getJob(t, s, j.ID), j, "stored job")
}

func testTransitionAuditAtomic(t *testing.T, s store.Store) {
	w, j := dispatched(t, s)
	transition(t, s, j, store.JobTransition{Step: lifecycle.Step{To: protocol.JobRunning, By: lifecycle.Report, Ack: true}, Audit: rec("job.transition")})
	j = getJob(t, s, j.ID)
	before := chain(t, s)
	// An audit record the store must refuse (no action) undoes the whole change.
	broken := audit.New("system", "", "", "job", j.ID, audit.Success, nil)
	_, err := s.TransitionJob(t.Context(), store.JobTransition{JobID: j.ID, ExpectAttempt: 1,
		From: protocol.JobRunning, Step: lifecycle.Step{To: protocol.JobCompleted, By: lifecycle.Report,
			EndAttempt: protocol.OutcomeCompleted, Error: ptr("x")}, Now: at(time.Hour), Audit: &broken})
	if err == nil {
		t.Fatal("a transition whose audit record cannot be stored must fail")
	}
	equal(t, getJob(t, s, j.ID), j, "job")
	if gw := getWorker(t, s, w.ID); gw.Status != protocol.WorkerBusy || gw.CurrentJobID != j.ID {
		t.Fatalf("worker freed by a failed transition: %+v", gw)
	}
	if as := attempts(t, s, j.ID); as[0].EndedAt != nil {
		t.Fatalf("attempt ended by a failed transition: %+v", as[0])
	}
	equal(t, chain(t, s), before, "audit log")
}

// finish takes a dispatched job to a terminal state by legal moves.
func finish(t *testing.T, s store.Store, j store.Job, end protocol.JobStatus) store.Job {
	t.Helper()
	switch end {
	case protocol.JobCompleted:
		return transition(t, s, j, store.JobTransition{Step: lifecycle.Step{To: end, By: lifecycle.Report, EndAttempt: protocol.OutcomeCompleted}})
	case protocol.JobFailed:
		return transition(t, s, j, store.JobTransition{Step: lifecycle.Step{To: end, By: lifecycle.Report, EndAttempt: protocol.OutcomeFailed}})
	}
	j = transition(t, s, j, store.JobTransition{Step: lifecycle.Step{To: protocol.JobCanceling, By: lifecycle.Cancel}})
	return transition(t, s, j, store.JobTransition{Step: lifecycle.Step{To: end, By: lifecycle.Report, EndAttempt: protocol.OutcomeCancelled}})
}

// What a worker reports its attempt used is stored with the attempt's end;
// an attempt ended without a report has none.
func testTransitionUsage(t *testing.T, s store.Store) {
	_, j := dispatched(t, s)
	util := 63.5
	u := &protocol.Usage{CPUSeconds: 1.25, PeakMemoryBytes: 3 << 30, GPUSeconds: 7.5, PeakGPUMemoryBytes: 1 << 30,
		GPUUtilizationPct: &util, GPUEvents: []string{"XID 13 (graphics engine exception) on GPU 0"}}
	transition(t, s, j, store.JobTransition{Step: lifecycle.Step{To: protocol.JobCompleted, By: lifecycle.Report,
		EndAttempt: protocol.OutcomeCompleted}, Usage: u})
	if as := attempts(t, s, j.ID); as[0].Usage == nil || !reflect.DeepEqual(*as[0].Usage, *u) {
		t.Fatalf("usage stored as %+v, want %+v", as[0].Usage, u)
	}
	// Without GPUs the GPU part stays empty, the utilisation unmeasured.
	_, j3 := dispatched(t, s)
	cpuOnly := &protocol.Usage{CPUSeconds: 2, PeakMemoryBytes: 1 << 20}
	transition(t, s, j3, store.JobTransition{Step: lifecycle.Step{To: protocol.JobCompleted, By: lifecycle.Report,
		EndAttempt: protocol.OutcomeCompleted}, Usage: cpuOnly})
	if as := attempts(t, s, j3.ID); as[0].Usage == nil || !reflect.DeepEqual(*as[0].Usage, *cpuOnly) {
		t.Fatalf("usage stored as %+v, want %+v", as[0].Usage, cpuOnly)
	}
	_, j2 := dispatched(t, s)
	transition(t, s, j2, store.JobTransition{Step: lifecycle.Step{To: protocol.JobQueued, By: lifecycle.Loss,
		EndAttempt: protocol.OutcomeWithdrawn}})
	if as := attempts(t, s, j2.ID); as[0].Usage != nil {
		t.Fatalf("an attempt ended without a report has usage %+v", as[0].Usage)
	}
}
