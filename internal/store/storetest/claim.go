package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/lifecycle"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

var claimTests = []test{
	{"ClaimOrder", testClaimOrder},
	{"ClaimSetsState", testClaimSetsState},
	{"ClaimOnlyQueued", testClaimOnlyQueued},
	{"ClaimWorkerNotAvailable", testClaimWorkerNotAvailable},
	{"ClaimAfterRequeue", testClaimAfterRequeue},
	{"ClaimConcurrent", testClaimConcurrent},
	{"ClaimJobsEachOnItsOwn", testClaimJobsEachOnItsOwn},
	{"ClaimJobsNamedOnly", testClaimJobsNamedOnly},
	{"ClaimJobsCountEarlierClaims", testClaimJobsCountEarlierClaims},
	{"ClaimJobsAgainstReports", testClaimJobsAgainstReports},
}

func testClaimOrder(t *testing.T, s store.Store) {
	// Priority descending, then submission order.
	prios := []int{0, 5, 1, 5, 0, 9}
	var ids []string
	for _, p := range prios {
		ids = append(ids, newJob(t, s, func(j *store.Job) { j.Priority = p }).ID)
	}
	want := []string{ids[5], ids[1], ids[3], ids[2], ids[0], ids[4]}
	for i, id := range want {
		w := newWorker(t, s)
		j, _ := claim(t, s, w.ID)
		if j.ID != id {
			t.Fatalf("claim %d got job %s (priority %d), want %s", i, j.ID, j.Priority, id)
		}
	}
	left, err := s.ListQueued(t.Context(), nil, 10)
	noErr(t, err, "ListQueued")
	equal(t, len(left), 0, "jobs queued after every one was claimed")
}

func testClaimSetsState(t *testing.T, s store.Store) {
	w := newWorker(t, s)
	j := newJob(t, s, func(j *store.Job) { j.Error = "left over" })
	r := audit.New("system", "", "job.dispatch", "worker", w.ID, audit.Success, nil)
	got, a, err := s.ClaimJob(t.Context(), store.ClaimRequest{WorkerID: w.ID, JobID: j.ID, UploadTokenHash: "uth",
		AckDeadline: at(time.Minute), Now: at(time.Second), Audit: &r})
	noErr(t, err, "ClaimJob")
	want := j
	want.Status, want.Attempt, want.WorkerID, want.Error = protocol.JobDispatched, 1, w.ID, ""
	want.AckDeadline, want.UpdatedAt = ptr(at(time.Minute)), at(time.Second)
	equal(t, got, want, "claimed job")
	equal(t, getJob(t, s, j.ID), want, "stored job")
	wantA := store.Attempt{JobID: j.ID, Number: 1, WorkerID: w.ID, UploadTokenHash: "uth", DispatchedAt: at(time.Second)}
	equal(t, a, wantA, "returned attempt")
	equal(t, attempts(t, s, j.ID), []store.Attempt{wantA}, "stored attempts")
	gw := getWorker(t, s, w.ID)
	if gw.Status != protocol.WorkerBusy || gw.CurrentJobID != j.ID {
		t.Fatalf("worker after claim: status %s, job %q", gw.Status, gw.CurrentJobID)
	}
	if recs := chain(t, s); len(recs) != 1 || recs[0].Action != "job.dispatch" || recs[0].Hash != r.Hash {
		t.Fatalf("audit after claim: %+v", recs)
	}
}

func testClaimOnlyQueued(t *testing.T, s store.Store) {
	w := newWorker(t, s)
	j := newJob(t, s)
	claim(t, s, w.ID)
	c := newJob(t, s)
	transition(t, s, c, store.JobTransition{Step: lifecycle.Step{To: protocol.JobCancelled, By: lifecycle.Cancel}})
	w2 := newWorker(t, s)
	for _, id := range []string{j.ID, c.ID, "job_missing"} {
		_, _, err := s.ClaimJob(t.Context(), store.ClaimRequest{WorkerID: w2.ID, JobID: id, Now: t0, AckDeadline: t0})
		wantErr(t, err, store.ErrNoJob, "claim of "+id+", not queued")
	}
	equal(t, len(attempts(t, s, j.ID)), 1, "attempts of the dispatched job")
	equal(t, len(attempts(t, s, c.ID)), 0, "attempts of the cancelled job")
	equal(t, getWorker(t, s, w2.ID), w2, "worker after refused claims")
}

func testClaimWorkerNotAvailable(t *testing.T, s store.Store) {
	// A worker that runs one job at a time and already has one.
	full, _ := dispatched(t, s)
	j := newJob(t, s)
	_, _, err := s.ClaimJob(t.Context(), store.ClaimRequest{WorkerID: full.ID, JobID: j.ID, Now: t0, AckDeadline: t0, Audit: rec("job.dispatch")})
	wantErr(t, err, store.ErrConflict, "worker with a job")
	equal(t, getWorker(t, s, full.ID), full, "worker after refused claim (has a job)")
	cases := map[string]func(*store.Worker){
		"busy":       func(w *store.Worker) { w.Status = protocol.WorkerBusy },
		"draining":   func(w *store.Worker) { w.Status = protocol.WorkerDraining },
		"offline":    func(w *store.Worker) { w.Status = protocol.WorkerOffline },
		"connecting": func(w *store.Worker) { w.Status = protocol.WorkerConnecting },
	}
	for name, mod := range cases {
		w := newWorker(t, s, mod)
		_, _, err := s.ClaimJob(t.Context(), store.ClaimRequest{WorkerID: w.ID, JobID: j.ID, Now: t0, AckDeadline: t0, Audit: rec("job.dispatch")})
		wantErr(t, err, store.ErrConflict, "worker "+name)
		equal(t, getWorker(t, s, w.ID), w, "worker after refused claim ("+name+")")
	}
	_, _, err = s.ClaimJob(t.Context(), store.ClaimRequest{WorkerID: "w_missing", JobID: j.ID, Now: t0, AckDeadline: t0})
	wantErr(t, err, store.ErrConflict, "missing worker")
	equal(t, getJob(t, s, j.ID), j, "job after refused claims")
	if n := len(chain(t, s)); n != 0 {
		t.Fatalf("refused claims appended %d audit records", n)
	}
}

func testClaimAfterRequeue(t *testing.T, s store.Store) {
	w1, w2 := newWorker(t, s), newWorker(t, s)
	newJob(t, s)
	j, _ := claim(t, s, w1.ID)
	j = transition(t, s, j, store.JobTransition{Step: lifecycle.Step{To: protocol.JobQueued, By: lifecycle.Deadline,
		EndAttempt: protocol.OutcomeWithdrawn, Error: ptr("no ack")}})
	if j.Error != "no ack" {
		t.Fatalf("requeued job error %q", j.Error)
	}
	j2, a := claim(t, s, w2.ID)
	if j2.ID != j.ID || j2.Attempt != 2 || a.Number != 2 || j2.WorkerID != w2.ID || j2.Error != "" {
		t.Fatalf("second claim: job %+v attempt %+v", j2, a)
	}
	as := attempts(t, s, j.ID)
	if len(as) != 2 || as[0].WorkerID != w1.ID || as[0].Outcome != protocol.OutcomeWithdrawn || as[1].WorkerID != w2.ID || as[1].EndedAt != nil {
		t.Fatalf("attempts: %+v", as)
	}
}

// testClaimConcurrent races claimers over more workers than jobs: no job may go
// out twice and no worker may get two jobs.
func testClaimConcurrent(t *testing.T, s store.Store) {
	const claimers, workers, jobs = 8, 12, 20
	var ws []store.Worker
	for i := 0; i < workers; i++ {
		ws = append(ws, newWorker(t, s))
	}
	for i := 0; i < jobs; i++ {
		newJob(t, s, func(j *store.Job) { j.Priority = i % 3 })
	}
	var mu sync.Mutex
	byJob := map[string]string{}
	byWorker := map[string]string{}
	var wg sync.WaitGroup
	errs := make(chan error, 2*claimers*workers)
	for c := 0; c < claimers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Every claimer tries every worker, starting at a different one,
			// each time with one of the first jobs in the queue as it reads it.
			for k := 0; k < workers; k++ {
				w := ws[(c+k)%workers]
				j, err := claimOneOfHead(t.Context(), s, store.ClaimRequest{WorkerID: w.ID, Now: t0,
					AckDeadline: at(time.Minute), Audit: rec("job.dispatch")}, c+k)
				if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNoJob) {
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				if prev, ok := byJob[j.ID]; ok {
					errs <- fmt.Errorf("job %s claimed by %s and %s", j.ID, prev, w.ID)
				}
				if prev, ok := byWorker[w.ID]; ok {
					errs <- fmt.Errorf("worker %s got %s and %s", w.ID, prev, j.ID)
				}
				byJob[j.ID], byWorker[w.ID] = w.ID, j.ID
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	raced := len(byJob)
	// Refused claims may have left workers idle; a last sequential pass must
	// then fill every worker.
	for _, w := range ws {
		if _, ok := byWorker[w.ID]; !ok {
			j, _ := claim(t, s, w.ID)
			byWorker[w.ID], byJob[j.ID] = j.ID, w.ID
		}
	}
	if len(byJob) != workers {
		t.Fatalf("%d jobs claimed by %d workers", len(byJob), workers)
	}
	// The store agrees with what the claimers saw.
	for _, w := range ws {
		gw := getWorker(t, s, w.ID)
		j := getJob(t, s, gw.CurrentJobID)
		if gw.Status != protocol.WorkerBusy || j.WorkerID != w.ID || j.Attempt != 1 || j.Status != protocol.JobDispatched {
			t.Fatalf("worker %+v holds job %+v", gw, j)
		}
	}
	queued, total, err := s.ListJobs(t.Context(), store.JobFilter{Statuses: []protocol.JobStatus{protocol.JobQueued}})
	noErr(t, err, "ListJobs")
	if total != jobs-workers || len(queued) != jobs-workers {
		t.Fatalf("%d jobs still queued, want %d", total, jobs-workers)
	}
	if n := len(chain(t, s)); n != raced {
		t.Fatalf("%d dispatch records for %d audited claims", n, raced)
	}
}

// One transaction of claims: each is made or refused on its own, a refused one
// changes nothing, and the ones made are stored, counted and audited in order.
func testClaimJobsEachOnItsOwn(t *testing.T, s store.Store) {
	shared := newWorker(t, s, sharing(2))
	idle := newWorker(t, s)
	full, _ := dispatched(t, s)
	a, b, c, d, e := newJob(t, s), newJob(t, s), newJob(t, s), newJob(t, s), newJob(t, s)
	transition(t, s, d, store.JobTransition{Step: lifecycle.Step{To: protocol.JobCancelled, By: lifecycle.Cancel}})
	before := getWorker(t, s, full.ID)
	countsBefore, err := s.CountJobs(t.Context())
	noErr(t, err, "CountJobs")
	req := func(w store.Worker, j store.Job, gpus ...int) store.ClaimRequest {
		return store.ClaimRequest{WorkerID: w.ID, JobID: j.ID, GPUs: gpus, UploadTokenHash: "up-" + j.ID,
			AckDeadline: at(time.Minute), Now: at(time.Second), Audit: rec("job.dispatch")}
	}
	reqs := []store.ClaimRequest{
		req(shared, a, 1),
		req(full, b),      // refused: the worker runs its one job
		req(shared, c, 1), // refused: GPU 1 went to a, in this transaction
		req(idle, d),      // refused: cancelled, not queued
		req(shared, e, 0), // made: the shared worker's other GPU
		req(idle, a),      // refused: a was claimed above
		{WorkerID: "w_missing", JobID: b.ID, Now: t0, AckDeadline: t0},
	}
	audited := len(chain(t, s))
	res, err := s.ClaimJobs(t.Context(), reqs)
	noErr(t, err, "ClaimJobs")
	equal(t, len(res), 7, "results")
	wantErr(t, res[1].Err, store.ErrConflict, "claim on a full worker")
	wantErr(t, res[2].Err, store.ErrConflict, "claim of a GPU leased earlier in the batch")
	wantErr(t, res[3].Err, store.ErrNoJob, "claim of a cancelled job")
	wantErr(t, res[5].Err, store.ErrNoJob, "claim of a job claimed earlier in the batch")
	wantErr(t, res[6].Err, store.ErrConflict, "claim for a missing worker")
	for _, i := range []int{0, 4} {
		noErr(t, res[i].Err, fmt.Sprintf("claim %d", i))
		got := res[i].Job
		equal(t, got, getJob(t, s, got.ID), fmt.Sprintf("claim %d: returned and stored job", i))
		if got.Status != protocol.JobDispatched || got.WorkerID != shared.ID || got.Attempt != 1 {
			t.Fatalf("claim %d: job %+v", i, got)
		}
		equal(t, attempts(t, s, got.ID), []store.Attempt{res[i].Attempt}, fmt.Sprintf("claim %d: attempts", i))
	}
	equal(t, res[0].Attempt.GPUs, []int{1}, "a's GPUs")
	equal(t, leaseIndices(t, s, shared.ID), []int{0, 1}, "the shared worker's leases")
	gw := getWorker(t, s, shared.ID)
	if gw.Status != protocol.WorkerBusy || gw.Running != 2 || gw.GPUsUsed != 2 || gw.CurrentJobID != e.ID {
		t.Fatalf("shared worker after the batch: %s running %d GPUs %d current %q", gw.Status, gw.Running, gw.GPUsUsed, gw.CurrentJobID)
	}
	equal(t, getWorker(t, s, idle.ID), idle, "the idle worker, all of whose claims were refused")
	equal(t, getWorker(t, s, full.ID), before, "the full worker")
	for _, j := range []store.Job{b, c} {
		if got := getJob(t, s, j.ID); got.Status != protocol.JobQueued || got.Attempt != 0 || len(attempts(t, s, j.ID)) != 0 {
			t.Fatalf("job %s changed by refused claims: %+v", j.ID, got)
		}
	}
	counts, err := s.CountJobs(t.Context())
	noErr(t, err, "CountJobs")
	if counts[protocol.JobQueued] != countsBefore[protocol.JobQueued]-2 || counts[protocol.JobDispatched] != countsBefore[protocol.JobDispatched]+2 {
		t.Fatalf("counts %v, before %v: want two jobs moved from queued to dispatched", counts, countsBefore)
	}
	recs := chain(t, s)
	if len(recs) != audited+2 || recs[audited].Hash != reqs[0].Audit.Hash || recs[audited+1].Hash != reqs[4].Audit.Hash {
		t.Fatalf("audit after the batch: %d records before, now %+v; want the two claims made, in order", audited, recs[audited:])
	}
}

// ClaimJobs claims named jobs only; a request without one fails the whole
// call before anything is written.
func testClaimJobsNamedOnly(t *testing.T, s store.Store) {
	w := newWorker(t, s)
	j := newJob(t, s)
	_, err := s.ClaimJobs(t.Context(), []store.ClaimRequest{
		{WorkerID: w.ID, JobID: j.ID, Now: t0, AckDeadline: t0},
		{WorkerID: w.ID, Now: t0, AckDeadline: t0},
	})
	if err == nil || !strings.Contains(err.Error(), "claim 1 names no job") {
		t.Fatalf("ClaimJobs with an unnamed claim: %v", err)
	}
	equal(t, getJob(t, s, j.ID), j, "the named job")
	equal(t, getWorker(t, s, w.ID), w, "the worker")
}

// Batches of claims, each naming its workers in a different order, race
// reports that end attempts and free those workers (TransitionJob takes the
// job, then the worker): every call ends, without a deadlock, and every job
// goes out once.
func testClaimJobsAgainstReports(t *testing.T, s store.Store) {
	const workers, jobs = 6, 60
	var ws []store.Worker
	for i := 0; i < workers; i++ {
		ws = append(ws, newWorker(t, s))
	}
	var queued []store.Job
	for i := 0; i < jobs; i++ {
		queued = append(queued, newJob(t, s))
	}
	var mu sync.Mutex
	dispatchedTo := map[string]int{}
	claimed := make(chan store.Job, 2*jobs)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for c := 0; c < 3; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := 0; ctx.Err() == nil; round++ {
				mu.Lock()
				done := len(dispatchedTo) == jobs
				mu.Unlock()
				if done {
					return
				}
				var reqs []store.ClaimRequest
				for k := 0; k < workers; k++ {
					w := ws[(c*2+round+k)%workers]
					if c%2 == 1 {
						w = ws[workers-1-(round+k)%workers]
					}
					j := queued[(c*7+round*workers+k)%jobs]
					reqs = append(reqs, store.ClaimRequest{WorkerID: w.ID, JobID: j.ID, Now: t0,
						AckDeadline: at(time.Minute), Audit: rec("job.dispatch")})
				}
				res, err := s.ClaimJobs(ctx, reqs)
				if err != nil {
					errs <- fmt.Errorf("ClaimJobs: %w", err)
					cancel()
					return
				}
				mu.Lock()
				for _, r := range res {
					if r.Err == nil {
						dispatchedTo[r.Job.ID]++
						claimed <- r.Job
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Add(1)
	go func() { // the reporter: ends each claimed attempt
		defer wg.Done()
		for range jobs {
			var j store.Job
			select {
			case j = <-claimed:
			case <-ctx.Done():
				return
			}
			_, err := s.TransitionJob(ctx, store.JobTransition{JobID: j.ID, From: protocol.JobDispatched,
				ExpectAttempt: j.Attempt, ExpectWorker: j.WorkerID, Now: t0,
				Step:  lifecycle.Step{To: protocol.JobCompleted, By: lifecycle.Report, EndAttempt: protocol.OutcomeCompleted},
				Audit: rec("job.completed")})
			if err != nil {
				errs <- fmt.Errorf("TransitionJob %s: %w", j.ID, err)
				cancel()
				return
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatalf("claims and reports did not finish within a minute: %d of %d jobs claimed", len(dispatchedTo), jobs)
	}
	for id, n := range dispatchedTo {
		if n != 1 {
			t.Fatalf("job %s went out %d times", id, n)
		}
	}
	for _, w := range ws {
		if gw := getWorker(t, s, w.ID); gw.Status != protocol.WorkerIdle || gw.Running != 0 {
			t.Fatalf("worker after every job completed: %s running %d", gw.Status, gw.Running)
		}
	}
	chain(t, s)
}

// A claim counts the claims made before it in the same transaction: a worker
// that runs one job at a time takes the first of two, and a worker with two
// GPUs does not take a third job after two.
func testClaimJobsCountEarlierClaims(t *testing.T, s store.Store) {
	single := newWorker(t, s)
	shared := newWorker(t, s, sharing(2))
	var jobs []store.Job
	for range 5 {
		jobs = append(jobs, newJob(t, s))
	}
	req := func(w store.Worker, j store.Job, gpus ...int) store.ClaimRequest {
		return store.ClaimRequest{WorkerID: w.ID, JobID: j.ID, GPUs: gpus, Now: t0, AckDeadline: t0}
	}
	res, err := s.ClaimJobs(t.Context(), []store.ClaimRequest{
		req(single, jobs[0]), req(single, jobs[1]),
		req(shared, jobs[2], 0), req(shared, jobs[3], 1), req(shared, jobs[4]),
	})
	noErr(t, err, "ClaimJobs")
	for i, want := range []error{nil, store.ErrConflict, nil, nil, store.ErrConflict} {
		if want == nil {
			noErr(t, res[i].Err, fmt.Sprintf("claim %d", i))
		} else {
			wantErr(t, res[i].Err, want, fmt.Sprintf("claim %d", i))
		}
	}
	if w := getWorker(t, s, single.ID); w.Running != 1 || w.Status != protocol.WorkerBusy {
		t.Fatalf("the one-job worker: %s running %d", w.Status, w.Running)
	}
	if w := getWorker(t, s, shared.ID); w.Running != 2 || w.GPUsUsed != 2 || w.Status != protocol.WorkerBusy {
		t.Fatalf("the two-GPU worker: %s running %d GPUs %d", w.Status, w.Running, w.GPUsUsed)
	}
	for _, j := range []store.Job{jobs[1], jobs[4]} {
		equal(t, getJob(t, s, j.ID).Status, protocol.JobQueued, "a refused job")
	}
}
