package storetest

import (
	"errors"
	"sync"
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/lifecycle"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

var gpuTests = []test{
	{"GPUClaimLeases", testGPUClaimLeases},
	{"GPUNeverTwice", testGPUNeverTwice},
	{"GPUFreedOnceEveryWay", testGPUFreedOnceEveryWay},
	{"GPUClaimNamedJob", testGPUClaimNamedJob},
	{"GPULeasesGoWithWorker", testGPULeasesGoWithWorker},
	{"GPUWholeWorkerAlone", testGPUWholeWorkerAlone},
	{"GPUKeptOutOfUse", testGPUKeptOutOfUse},
	{"GPUWholeWorkerJobRoundTrip", testGPUWholeWorkerJobRoundTrip},
	{"QueuedGPUDemand", testQueuedGPUDemand},
}

// claimGPUs claims the next queued job for w with the given GPUs.
func claimGPUs(t *testing.T, s store.Store, w store.Worker, gpus ...int) (store.Job, error) {
	t.Helper()
	j, _, err := s.ClaimJob(t.Context(), store.ClaimRequest{WorkerID: w.ID, JobID: headOfQueue(t, s), GPUs: gpus, UploadTokenHash: "up",
		AckDeadline: at(60e9), Now: at(1e9)})
	return j, err
}

func leaseIndices(t *testing.T, s store.Store, workerID string) []int {
	t.Helper()
	ls, err := s.GPULeases(t.Context(), workerID)
	noErr(t, err, "GPULeases")
	out := []int{}
	for _, l := range ls {
		out = append(out, l.Index)
	}
	return out
}

// A claim leases its GPUs, records them on the attempt, and counts them on
// the worker, whose status goes partial while room is left, busy when not.
func testGPUClaimLeases(t *testing.T, s store.Store) {
	w := newWorker(t, s, sharing(4))
	newJob(t, s)
	newJob(t, s)
	j, err := claimGPUs(t, s, w, 1, 3)
	noErr(t, err, "claim with GPUs 1 and 3")
	equal(t, leaseIndices(t, s, w.ID), []int{1, 3}, "leases")
	equal(t, attempts(t, s, j.ID)[0].GPUs, []int{1, 3}, "the attempt's GPUs")
	gw := getWorker(t, s, w.ID)
	if gw.Status != protocol.WorkerPartial || gw.Running != 1 || gw.GPUsUsed != 2 {
		t.Fatalf("worker after a 2-GPU claim: %s running %d gpus used %d", gw.Status, gw.Running, gw.GPUsUsed)
	}
	_, err = claimGPUs(t, s, w, 0, 2)
	noErr(t, err, "claim with the other two GPUs")
	if gw := getWorker(t, s, w.ID); gw.Status != protocol.WorkerBusy || gw.GPUsUsed != 4 {
		t.Fatalf("worker with every GPU leased: %s gpus used %d", gw.Status, gw.GPUsUsed)
	}
	newJob(t, s)
	_, err = claimGPUs(t, s, w)
	wantErr(t, err, store.ErrConflict, "claim on a worker with every GPU leased")
	w2 := newWorker(t, s, sharing(2))
	_, err = claimGPUs(t, s, w2, 5)
	wantErr(t, err, store.ErrConflict, "a GPU the worker does not have")
	equal(t, leaseIndices(t, s, w2.ID), []int{}, "leases after a refused claim")
}

// Claimers racing for one GPU of one worker (on different jobs): one wins,
// the others get ErrConflict, and the GPU has one lease.
func testGPUNeverTwice(t *testing.T, s store.Store) {
	w := newWorker(t, s, sharing(8))
	const racers = 8
	for range racers {
		newJob(t, s)
	}
	for round := range 3 {
		var wg sync.WaitGroup
		errs := make([]error, racers)
		for i := range racers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = claimGPUs(t, s, w, round)
			}()
		}
		wg.Wait()
		won := 0
		for _, err := range errs {
			switch {
			case err == nil:
				won++
			case !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrNoJob):
				t.Fatalf("round %d: %v", round, err)
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d claims got GPU %d", round, won, round)
		}
	}
	equal(t, leaseIndices(t, s, w.ID), []int{0, 1, 2}, "leases after three rounds")
	if gw := getWorker(t, s, w.ID); gw.Running != 3 || gw.GPUsUsed != 3 {
		t.Fatalf("worker counts: running %d gpus used %d", gw.Running, gw.GPUsUsed)
	}
}

// However an attempt ends, its GPUs come back exactly once: a second end
// is refused by the compare-and-set and the counts never go below zero.
func testGPUFreedOnceEveryWay(t *testing.T, s store.Store) {
	ends := map[string][]lifecycle.Step{
		"completed": {{To: protocol.JobRunning, By: lifecycle.Report, Ack: true},
			{To: protocol.JobCompleted, By: lifecycle.Report, EndAttempt: protocol.OutcomeCompleted}},
		"failed": {{To: protocol.JobRunning, By: lifecycle.Report, Ack: true},
			{To: protocol.JobFailed, By: lifecycle.Report, EndAttempt: protocol.OutcomeFailed}},
		"cancelled": {{To: protocol.JobRunning, By: lifecycle.Report, Ack: true},
			{To: protocol.JobCanceling, By: lifecycle.Cancel},
			{To: protocol.JobCancelled, By: lifecycle.Report, EndAttempt: protocol.OutcomeCancelled}},
		"worker lost": {{To: protocol.JobRunning, By: lifecycle.Report, Ack: true},
			{To: protocol.JobQueued, By: lifecycle.Loss, EndAttempt: protocol.OutcomeWorkerLost, SpendRetry: true}},
		"withdrawn": {{To: protocol.JobQueued, By: lifecycle.Loss, EndAttempt: protocol.OutcomeWithdrawn}},
	}
	for name, steps := range ends {
		t.Run(name, func(t *testing.T) {
			w := newWorker(t, s, sharing(4))
			newJob(t, s)
			keep, err := claimGPUs(t, s, w, 0)
			noErr(t, err, "claim of the job that keeps running")
			newJob(t, s)
			j, err := claimGPUs(t, s, w, 2, 3)
			noErr(t, err, "claim")
			for _, st := range steps {
				j = transition(t, s, j, store.JobTransition{Step: st})
			}
			equal(t, leaseIndices(t, s, w.ID), []int{0}, "leases after the attempt ended "+name)
			gw := getWorker(t, s, w.ID)
			if gw.Running != 1 || gw.GPUsUsed != 1 || gw.Status != protocol.WorkerPartial || gw.CurrentJobID != keep.ID {
				t.Fatalf("after %s: %s running %d gpus used %d current %q", name, gw.Status, gw.Running, gw.GPUsUsed, gw.CurrentJobID)
			}
			// Ending it again is a stale report: nothing changes.
			last := steps[len(steps)-1]
			_, err = s.TransitionJob(t.Context(), store.JobTransition{JobID: j.ID, ExpectAttempt: 1,
				From: protocol.JobRunning, Step: lifecycle.Step{To: last.To, By: last.By, EndAttempt: protocol.OutcomeWorkerLost}})
			if err == nil {
				t.Fatalf("a second end of the attempt (%s) was applied", name)
			}
			if gw := getWorker(t, s, w.ID); gw.Running != 1 || gw.GPUsUsed != 1 {
				t.Fatalf("after a refused second end: running %d gpus used %d", gw.Running, gw.GPUsUsed)
			}
		})
	}
}

// A claim for a named job takes that one, and only while it is queued.
func testGPUClaimNamedJob(t *testing.T, s store.Store) {
	w := newWorker(t, s, sharing(2))
	first := newJob(t, s)
	second := newJob(t, s)
	j, _, err := s.ClaimJob(t.Context(), store.ClaimRequest{WorkerID: w.ID, JobID: second.ID, GPUs: []int{1}, Now: t0, AckDeadline: t0})
	noErr(t, err, "claim of the second job by name")
	equal(t, j.ID, second.ID, "claimed job")
	_, _, err = s.ClaimJob(t.Context(), store.ClaimRequest{WorkerID: w.ID, JobID: second.ID, GPUs: []int{0}, Now: t0, AckDeadline: t0})
	wantErr(t, err, store.ErrNoJob, "claim of a job no longer queued")
	equal(t, getJob(t, s, first.ID).Status, protocol.JobQueued, "the first job")
	equal(t, leaseIndices(t, s, w.ID), []int{1}, "leases")
}

// Deleting a worker drops its leases.
func testGPULeasesGoWithWorker(t *testing.T, s store.Store) {
	w := newWorker(t, s, sharing(2))
	newJob(t, s)
	_, err := claimGPUs(t, s, w, 0, 1)
	noErr(t, err, "claim")
	r := audit.New("admin:t", "", "worker.delete", "worker", w.ID, audit.Success, nil)
	noErr(t, s.DeleteWorker(t.Context(), w.ID, &r), "DeleteWorker")
	if got := leaseIndices(t, s, w.ID); len(got) != 0 {
		t.Fatalf("leases of a deleted worker: %v", got)
	}
}

// A claim that takes the whole worker needs a worker running nothing, and
// while its attempt runs nothing else is claimed there, not even a job
// without GPUs; when it ends, the worker takes jobs again.
func testGPUWholeWorkerAlone(t *testing.T, s store.Store) {
	w := newWorker(t, s, sharing(4))
	busy := newJob(t, s)
	_, _, err := s.ClaimJob(t.Context(), store.ClaimRequest{WorkerID: w.ID, JobID: busy.ID, GPUs: []int{0}, Now: t0, AckDeadline: t0})
	noErr(t, err, "a one-GPU claim")
	whole := newJob(t, s)
	_, _, err = s.ClaimJob(t.Context(), store.ClaimRequest{WorkerID: w.ID, JobID: whole.ID, GPUs: []int{1, 2, 3}, WholeWorker: true, Now: t0, AckDeadline: t0})
	wantErr(t, err, store.ErrConflict, "a whole-worker claim beside a running attempt")
	equal(t, getJob(t, s, whole.ID).Status, protocol.JobQueued, "the refused job")

	w2 := newWorker(t, s, sharing(2))
	j, _, err := s.ClaimJob(t.Context(), store.ClaimRequest{WorkerID: w2.ID, JobID: whole.ID, GPUs: []int{0, 1}, WholeWorker: true, Now: t0, AckDeadline: t0})
	noErr(t, err, "a whole-worker claim on an idle worker")
	if gw := getWorker(t, s, w2.ID); !gw.WholeWorkerHeld || gw.Status != protocol.WorkerBusy || gw.Running != 1 {
		t.Fatalf("worker held whole: held %v status %s running %d", gw.WholeWorkerHeld, gw.Status, gw.Running)
	}
	cpuOnly := newJob(t, s)
	_, _, err = s.ClaimJob(t.Context(), store.ClaimRequest{WorkerID: w2.ID, JobID: cpuOnly.ID, Now: t0, AckDeadline: t0})
	wantErr(t, err, store.ErrConflict, "a job without GPUs beside a whole-worker attempt")

	transition(t, s, j, store.JobTransition{Step: lifecycle.Step{To: protocol.JobQueued, By: lifecycle.Loss,
		EndAttempt: protocol.OutcomeWithdrawn}})
	if gw := getWorker(t, s, w2.ID); gw.WholeWorkerHeld || gw.Status != protocol.WorkerIdle || gw.Running != 0 {
		t.Fatalf("worker after the whole-worker attempt ended: held %v status %s running %d", gw.WholeWorkerHeld, gw.Status, gw.Running)
	}
	_, _, err = s.ClaimJob(t.Context(), store.ClaimRequest{WorkerID: w2.ID, JobID: cpuOnly.ID, Now: t0, AckDeadline: t0})
	noErr(t, err, "a job without GPUs once the worker is free")
}

// A GPU the worker keeps out of use (held or unhealthy) is refused to a claim.
func testGPUKeptOutOfUse(t *testing.T, s store.Store) {
	w := newWorker(t, s, sharing(2), func(w *store.Worker) {
		w.GPUConditions = []protocol.GPUCondition{{Index: 1, State: protocol.GPUUnhealthy, Reason: "XID 79 (fell off the bus)", Since: "2030-01-01T00:00:00Z"}}
	})
	newJob(t, s)
	_, err := claimGPUs(t, s, w, 1)
	wantErr(t, err, store.ErrConflict, "a claim of an unhealthy GPU")
	equal(t, leaseIndices(t, s, w.ID), []int{}, "leases after the refused claim")
	_, err = claimGPUs(t, s, w, 0)
	noErr(t, err, "a claim of the healthy GPU")
	if gw := getWorker(t, s, w.ID); gw.Capacity().FreeUsableGPUs() != 0 {
		t.Fatalf("free usable GPUs with one leased and one unhealthy: %d", gw.Capacity().FreeUsableGPUs())
	}
}

// A job that takes the whole worker says so when read back, and in the queue.
func testGPUWholeWorkerJobRoundTrip(t *testing.T, s store.Store) {
	j := newJob(t, s, func(j *store.Job) { j.WholeWorker, j.GPUCount = true, 0 })
	equal(t, getJob(t, s, j.ID).WholeWorker, true, "whole_worker read back")
	q, err := s.ListQueued(t.Context(), nil, 10)
	noErr(t, err, "ListQueued")
	if len(q) != 1 || !q[0].WholeWorker {
		t.Fatalf("queued job: %+v", q)
	}
}

// What the queued jobs ask for: GPUs by count, and whole workers; jobs no
// longer queued do not count.
func testQueuedGPUDemand(t *testing.T, s store.Store) {
	gpus, whole, err := s.QueuedGPUDemand(t.Context())
	noErr(t, err, "QueuedGPUDemand of an empty queue")
	equal(t, [2]int{gpus, whole}, [2]int{0, 0}, "demand of an empty queue")
	newJob(t, s, func(j *store.Job) { j.GPUCount = 4 })
	newJob(t, s, func(j *store.Job) { j.GPUCount = 0 })
	newJob(t, s, func(j *store.Job) { j.GPUCount, j.WholeWorker = 0, true })
	newJob(t, s, func(j *store.Job) { j.GPUCount, j.Status = 8, protocol.JobCompleted })
	gpus, whole, err = s.QueuedGPUDemand(t.Context())
	noErr(t, err, "QueuedGPUDemand")
	equal(t, [2]int{gpus, whole}, [2]int{4, 1}, "demand")
}
