package storetest

import (
	"errors"
	"fmt"
	"sort"
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
	{"ClaimMatch", testClaimMatch},
	{"ClaimMatchOrderAcrossPages", testClaimMatchOrderAcrossPages},
	{"ClaimOnlyQueued", testClaimOnlyQueued},
	{"ClaimWorkerNotAvailable", testClaimWorkerNotAvailable},
	{"ClaimAfterRequeue", testClaimAfterRequeue},
	{"ClaimConcurrent", testClaimConcurrent},
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
	w := newWorker(t, s)
	_, _, err := s.ClaimJob(t.Context(), store.ClaimRequest{WorkerID: w.ID, Now: t0, AckDeadline: t0})
	wantErr(t, err, store.ErrNoJob, "claim from an empty queue")
}

func testClaimSetsState(t *testing.T, s store.Store) {
	w := newWorker(t, s)
	j := newJob(t, s, func(j *store.Job) { j.Error = "left over" })
	r := audit.New("system", "", "job.dispatch", "worker", w.ID, audit.Success, nil)
	got, a, err := s.ClaimJob(t.Context(), store.ClaimRequest{WorkerID: w.ID, UploadTokenHash: "uth",
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

func testClaimMatch(t *testing.T, s store.Store) {
	small := newJob(t, s, func(j *store.Job) { j.GPUCount, j.Priority = 1, 1 })
	big := newJob(t, s, func(j *store.Job) { j.GPUCount, j.Priority = 8, 9 })
	w := newWorker(t, s)
	var seen []string
	j, _, err := s.ClaimJob(t.Context(), store.ClaimRequest{WorkerID: w.ID, Now: t0, AckDeadline: t0,
		Match: func(j store.Job) bool { seen = append(seen, j.ID); return j.GPUCount <= 2 }})
	noErr(t, err, "ClaimJob")
	equal(t, j.ID, small.ID, "claimed job")
	equal(t, seen, []string{big.ID, small.ID}, "jobs offered to Match, in order")

	w2 := newWorker(t, s)
	_, _, err = s.ClaimJob(t.Context(), store.ClaimRequest{WorkerID: w2.ID, Now: t0, AckDeadline: t0,
		Match: func(store.Job) bool { return false }})
	wantErr(t, err, store.ErrNoJob, "nothing matches")
	if got := getWorker(t, s, w2.ID); got.Status != protocol.WorkerIdle || got.CurrentJobID != "" {
		t.Fatalf("worker changed by a failed claim: %+v", got)
	}
	if got := getJob(t, s, big.ID); got.Status != protocol.JobQueued || got.Attempt != 0 {
		t.Fatalf("job changed by a failed claim: %+v", got)
	}
}

func testClaimOnlyQueued(t *testing.T, s store.Store) {
	w := newWorker(t, s)
	j := newJob(t, s)
	claim(t, s, w.ID)
	c := newJob(t, s)
	transition(t, s, c, store.JobTransition{Step: lifecycle.Step{To: protocol.JobCancelled, By: lifecycle.Cancel}})
	w2 := newWorker(t, s)
	_, _, err := s.ClaimJob(t.Context(), store.ClaimRequest{WorkerID: w2.ID, Now: t0, AckDeadline: t0})
	wantErr(t, err, store.ErrNoJob, "only dispatched and cancelled jobs left")
	equal(t, len(attempts(t, s, j.ID)), 1, "attempts of the dispatched job")
}

func testClaimWorkerNotAvailable(t *testing.T, s store.Store) {
	// A worker that runs one job at a time and already has one.
	full, _ := dispatched(t, s)
	j := newJob(t, s)
	_, _, err := s.ClaimJob(t.Context(), store.ClaimRequest{WorkerID: full.ID, Now: t0, AckDeadline: t0, Audit: rec("job.dispatch")})
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
		_, _, err := s.ClaimJob(t.Context(), store.ClaimRequest{WorkerID: w.ID, Now: t0, AckDeadline: t0, Audit: rec("job.dispatch")})
		wantErr(t, err, store.ErrConflict, "worker "+name)
		equal(t, getWorker(t, s, w.ID), w, "worker after refused claim ("+name+")")
	}
	_, _, err = s.ClaimJob(t.Context(), store.ClaimRequest{WorkerID: "w_missing", Now: t0, AckDeadline: t0})
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
			// Every claimer tries every worker, starting at a different one.
			for k := 0; k < workers; k++ {
				w := ws[(c+k)%workers]
				j, _, err := s.ClaimJob(t.Context(), store.ClaimRequest{WorkerID: w.ID, Now: t0,
					AckDeadline: at(time.Minute), Audit: rec("job.dispatch")})
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
	// Claimers that skipped locked candidates may have left workers idle; a
	// last sequential pass must then fill every worker.
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

// The claim reads candidates a page at a time; Match must still see them in
// claim order (priority descending, then submission order), ties included.
func testClaimMatchOrderAcrossPages(t *testing.T, s store.Store) {
	var jobs []store.Job
	for i := 0; i < 30; i++ {
		jobs = append(jobs, newJob(t, s, func(j *store.Job) { j.Priority = []int{5, 9, 5, 1, 9}[i%5] }))
	}
	sort.Slice(jobs, func(a, b int) bool {
		if jobs[a].Priority != jobs[b].Priority {
			return jobs[a].Priority > jobs[b].Priority
		}
		return jobs[a].Seq < jobs[b].Seq
	})
	want := jobs[:20] // the 20th in claim order is the one that matches
	w := newWorker(t, s)
	var seen []string
	j, _, err := s.ClaimJob(t.Context(), store.ClaimRequest{WorkerID: w.ID, Now: t0, AckDeadline: t0,
		Match: func(j store.Job) bool { seen = append(seen, j.ID); return j.ID == want[len(want)-1].ID }})
	noErr(t, err, "ClaimJob")
	equal(t, j.ID, want[len(want)-1].ID, "claimed job")
	var wantIDs []string
	for _, j := range want {
		wantIDs = append(wantIDs, j.ID)
	}
	equal(t, seen, wantIDs, "jobs offered to Match, in order")
}
