package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/lifecycle"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

var historyTests = []test{
	{"ListJobsKeysetPages", testListJobsKeysetPages},
	{"CountsFollowEveryMove", testCountsFollowEveryMove},
	{"CountsConcurrent", testCountsConcurrent},
	{"RetentionDeletesFinishedJobs", testRetentionDeletesFinishedJobs},
	{"RetentionDeletesLogs", testRetentionDeletesLogs},
	{"RetentionMarks", testRetentionMarks},
	{"PruneAuditKeepsChainVerifiable", testPruneAudit},
	{"Sizes", testSizes},
	{"RetentionLock", testRetentionLock},
}

// allJobs lists every job oldest first, the way the tests' expectations are
// computed (filtering in Go).
func allJobs(t *testing.T, s store.Store) []store.Job {
	t.Helper()
	js, _, err := s.ListJobs(t.Context(), store.JobFilter{})
	noErr(t, err, "ListJobs")
	return js
}

// checkCounts compares CountJobs with the jobs counted one by one.
func checkCounts(t *testing.T, s store.Store, what string) {
	t.Helper()
	want := map[protocol.JobStatus]int{}
	for _, j := range allJobs(t, s) {
		want[j.Status]++
	}
	got, err := s.CountJobs(t.Context())
	noErr(t, err, "CountJobs")
	equal(t, got, want, "CountJobs "+what)
}

// historyFixture makes jobs in every state on three workers, some requeued
// (their worker is cleared), and returns the workers.
func historyFixture(t *testing.T, s store.Store) []store.Worker {
	t.Helper()
	var ws []store.Worker
	for range 3 {
		ws = append(ws, newWorker(t, s))
	}
	ends := []protocol.JobStatus{protocol.JobCompleted, protocol.JobFailed, protocol.JobCancelled, protocol.JobCompleted}
	for round := range 4 {
		for i, w := range ws {
			newJob(t, s, func(j *store.Job) { j.Priority = round + i })
			j, _ := claim(t, s, w.ID)
			finish(t, s, j, ends[(round+i)%len(ends)])
		}
	}
	for range 5 {
		newJob(t, s)
	}
	j, _ := claim(t, s, ws[0].ID) // stays dispatched
	_ = j
	j, _ = claim(t, s, ws[1].ID)
	transition(t, s, j, store.JobTransition{Step: lifecycle.Step{To: protocol.JobRunning, By: lifecycle.Report, Ack: true}})
	return ws
}

func testListJobsKeysetPages(t *testing.T, s store.Store) {
	ws := historyFixture(t, s)
	all := allJobs(t, s)
	if len(all) != 17 {
		t.Fatalf("fixture made %d jobs", len(all))
	}
	filters := []store.JobFilter{
		{},
		{Statuses: []protocol.JobStatus{protocol.JobQueued}},
		{Statuses: []protocol.JobStatus{protocol.JobCompleted}},
		{Statuses: protocol.ActiveJobStatuses()},
		{Statuses: []protocol.JobStatus{protocol.JobFailed, protocol.JobCancelled, protocol.JobFailed}},
		{WorkerID: ws[0].ID},
		{WorkerID: ws[1].ID, Statuses: []protocol.JobStatus{protocol.JobCompleted}},
		{WorkerID: ws[1].ID, Statuses: []protocol.JobStatus{protocol.JobCompleted, protocol.JobRunning}},
		{WorkerID: "w_nobody"},
	}
	for _, f := range filters {
		var want []string
		for _, j := range all {
			if (len(f.Statuses) == 0 || slices.Contains(f.Statuses, j.Status)) && (f.WorkerID == "" || j.WorkerID == f.WorkerID) {
				want = append(want, j.ID)
			}
		}
		for _, newest := range []bool{false, true} {
			exp := slices.Clone(want)
			if newest {
				slices.Reverse(exp)
			}
			name := fmt.Sprintf("%+v newest=%v", f, newest)
			// Keyset pages of 4.
			var got []string
			pf := f
			pf.Newest, pf.Limit = newest, 4
			for pages := 0; ; pages++ {
				js, total, err := s.ListJobs(t.Context(), pf)
				noErr(t, err, "ListJobs "+name)
				wantTotal := len(want)
				if f.WorkerID != "" {
					wantTotal = -1
				}
				equal(t, total, wantTotal, "total "+name)
				for _, j := range js {
					got = append(got, j.ID)
				}
				if len(js) < 4 || pages > 10 {
					break
				}
				pf.AfterSeq = js[len(js)-1].Seq
			}
			equal(t, got, exp, "keyset pages "+name)
			// Offset pages of 3 still work, in either order.
			got = nil
			for off := 0; off < len(exp)+3; off += 3 {
				of := f
				of.Newest, of.Limit, of.Offset = newest, 3, off
				js, _, err := s.ListJobs(t.Context(), of)
				noErr(t, err, "ListJobs offset "+name)
				for _, j := range js {
					got = append(got, j.ID)
				}
			}
			equal(t, got, exp, "offset pages "+name)
		}
	}
}

func testCountsFollowEveryMove(t *testing.T, s store.Store) {
	checkCounts(t, s, "empty")
	for _, st := range lifecycle.States {
		inState(t, s, st)
		checkCounts(t, s, "after making a "+string(st)+" job")
	}
	// Refused moves change no count.
	_, j := inState(t, s, protocol.JobRunning)
	_, err := s.TransitionJob(t.Context(), store.JobTransition{JobID: j.ID, ExpectAttempt: j.Attempt, From: protocol.JobQueued,
		Step: lifecycle.Step{To: protocol.JobCompleted, By: lifecycle.Report, EndAttempt: protocol.OutcomeCompleted}})
	wantErr(t, err, store.ErrConflict, "stale transition")
	checkCounts(t, s, "after a refused move")
	// A requeue and a second claim.
	w := getWorker(t, s, j.WorkerID)
	j = transition(t, s, j, store.JobTransition{Step: lifecycle.Step{To: protocol.JobQueued, By: lifecycle.Loss, EndAttempt: protocol.OutcomeWorkerLost, SpendRetry: true}})
	checkCounts(t, s, "after a requeue")
	_, _, err = s.ClaimJob(t.Context(), store.ClaimRequest{WorkerID: w.ID, JobID: j.ID, UploadTokenHash: "up", AckDeadline: at(time.Minute),
		Now: at(2 * time.Hour)})
	noErr(t, err, "second claim")
	checkCounts(t, s, "after a second claim")
	// Progress without a status change.
	j = getJob(t, s, j.ID)
	j = transition(t, s, j, store.JobTransition{Step: lifecycle.Step{To: protocol.JobRunning, By: lifecycle.Report, Ack: true}})
	transition(t, s, j, store.JobTransition{Step: lifecycle.Step{To: protocol.JobRunning, By: lifecycle.Report}, Progress: []byte(`{"step":2}`)})
	checkCounts(t, s, "after progress")
}

func testCountsConcurrent(t *testing.T, s store.Store) {
	var ws []store.Worker
	for range 4 {
		ws = append(ws, newWorker(t, s))
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 4 {
		wg.Add(2)
		go func() { // submitters
			defer wg.Done()
			for range 10 {
				if _, err := s.InsertJob(t.Context(), store.Job{ConfigName: "c", CreatedAt: t0}, rec("job.submit")); err != nil {
					errs <- err
				}
			}
		}()
		go func(w store.Worker) { // a worker claiming and finishing
			defer wg.Done()
			for range 10 {
				j, err := claimOneOfHead(t.Context(), s, store.ClaimRequest{WorkerID: w.ID, UploadTokenHash: "up",
					AckDeadline: at(time.Minute), Now: at(time.Second), Audit: rec("job.dispatch")}, 0)
				if errors.Is(err, store.ErrNoJob) {
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				if _, err := s.TransitionJob(t.Context(), store.JobTransition{JobID: j.ID, ExpectAttempt: j.Attempt, From: j.Status,
					Step: lifecycle.Step{To: protocol.JobCompleted, By: lifecycle.Report, EndAttempt: protocol.OutcomeCompleted},
					Now:  at(time.Hour), Audit: rec("job.transition")}); err != nil {
					errs <- err
					return
				}
			}
		}(ws[i])
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	checkCounts(t, s, "after concurrent submits, claims and completions")
}

// finishedAt makes a job and takes it to end, ended at the given time.
func finishedAt(t *testing.T, s store.Store, w store.Worker, end protocol.JobStatus, ended time.Time) store.Job {
	t.Helper()
	j := newJob(t, s)
	j, _, err := s.ClaimJob(t.Context(), store.ClaimRequest{WorkerID: w.ID, JobID: j.ID, UploadTokenHash: "up", AckDeadline: at(time.Minute),
		Now: ended.Add(-time.Minute)})
	noErr(t, err, "claim")
	out := map[protocol.JobStatus]protocol.AttemptOutcome{protocol.JobCompleted: protocol.OutcomeCompleted,
		protocol.JobFailed: protocol.OutcomeFailed}[end]
	return transition(t, s, j, store.JobTransition{Step: lifecycle.Step{To: end, By: lifecycle.Report, EndAttempt: out}, Now: ended})
}

func testRetentionDeletesFinishedJobs(t *testing.T, s store.Store) {
	ctx := t.Context()
	w := newWorker(t, s)
	old1 := finishedAt(t, s, w, protocol.JobCompleted, at(-3*time.Hour))
	old2 := finishedAt(t, s, w, protocol.JobFailed, at(-2*time.Hour))
	recent := finishedAt(t, s, w, protocol.JobCompleted, at(time.Hour))
	appendLog(t, s, old1.ID, 1, 0, "old output\n", 0, 11, false)
	running, _ := inState(t, s, protocol.JobRunning)
	_ = running
	active := allJobs(t, s)[3]
	queued := newJob(t, s)

	ended, err := s.EndedJobs(ctx, store.RetentionMark{}, at(0), 10)
	noErr(t, err, "EndedJobs")
	equal(t, []string{ended[0].ID, ended[1].ID}, []string{old1.ID, old2.ID}, "ended before t0, in end order")
	if len(ended) != 2 {
		t.Fatalf("EndedJobs = %+v", ended)
	}
	page, err := s.EndedJobs(ctx, ended[0].Mark(), at(0), 10)
	noErr(t, err, "EndedJobs after a mark")
	if len(page) != 1 || page[0].ID != old2.ID {
		t.Fatalf("EndedJobs after %s = %+v", old1.ID, page)
	}

	// Jobs that are not finished, or finished after the cut-off, survive
	// even when asked for by id.
	n, err := s.DeleteJobs(ctx, []string{old1.ID, old2.ID, recent.ID, active.ID, queued.ID, "j_unknown"}, at(0))
	noErr(t, err, "DeleteJobs")
	equal(t, n, 2, "jobs deleted")
	for _, id := range []string{old1.ID, old2.ID} {
		_, err := s.GetJob(ctx, id)
		wantErr(t, err, store.ErrNotFound, "GetJob of a deleted job")
		_, err = s.ListAttempts(ctx, id)
		wantErr(t, err, store.ErrNotFound, "ListAttempts of a deleted job")
		_, err = s.ReadLog(ctx, id, store.LogCursor{}, 0)
		wantErr(t, err, store.ErrNotFound, "ReadLog of a deleted job")
	}
	for _, id := range []string{recent.ID, active.ID, queued.ID} {
		getJob(t, s, id)
	}
	checkCounts(t, s, "after deleting jobs")
	if active.Status.Terminal() || queued.Status != protocol.JobQueued {
		t.Fatalf("fixture: active %s, queued %s", active.Status, queued.Status)
	}
	// The worker that ran them stays, and can run more.
	newJob(t, s)
	claim(t, s, w.ID)
}

func testRetentionDeletesLogs(t *testing.T, s store.Store) {
	ctx := t.Context()
	w := newWorker(t, s)
	old := finishedAt(t, s, w, protocol.JobCompleted, at(-time.Hour))
	recent := finishedAt(t, s, w, protocol.JobCompleted, at(time.Hour))
	appendLog(t, s, old.ID, 1, 0, "0123456789", 0, 10, false)
	appendLog(t, s, recent.ID, 1, 0, "abc", 0, 3, false)
	_, live := inState(t, s, protocol.JobRunning)
	appendLog(t, s, live.ID, 1, 0, "live", 0, 4, false)
	sz, err := s.Sizes(ctx)
	noErr(t, err, "Sizes")
	equal(t, sz.LogBytes, int64(17), "log bytes before")

	ended, err := s.EndedJobs(ctx, store.RetentionMark{}, at(0), 10)
	noErr(t, err, "EndedJobs")
	mark := ended[len(ended)-1].Mark()
	freed, err := s.DeleteJobLogs(ctx, []string{old.ID, recent.ID, live.ID}, at(0), mark)
	noErr(t, err, "DeleteJobLogs")
	equal(t, freed, int64(10), "bytes freed")
	equal(t, readAll(t, s, old.ID), map[int]string{}, "log of the old job")
	equal(t, readAll(t, s, recent.ID), map[int]string{1: "abc"}, "log of the recent job")
	equal(t, readAll(t, s, live.ID), map[int]string{1: "live"}, "log of the running job")
	getJob(t, s, old.ID) // the job itself stays
	got, err := s.RetentionMark(ctx, store.RetainLogs)
	noErr(t, err, "RetentionMark")
	if !got.EndedAt.Equal(mark.EndedAt) || got.Seq != mark.Seq {
		t.Fatalf("logs mark %+v, want %+v", got, mark)
	}
	sz, err = s.Sizes(ctx)
	noErr(t, err, "Sizes")
	equal(t, sz.LogBytes, int64(7), "log bytes after")
}

func testRetentionMarks(t *testing.T, s store.Store) {
	ctx := t.Context()
	m, err := s.RetentionMark(ctx, store.RetainArtifacts)
	noErr(t, err, "RetentionMark")
	equal(t, m, store.RetentionMark{}, "no mark yet")
	for _, want := range []store.RetentionMark{{EndedAt: at(time.Second), Seq: 7}, {EndedAt: at(time.Hour), Seq: 3}} {
		noErr(t, s.SetRetentionMark(ctx, store.RetainArtifacts, want), "SetRetentionMark")
		m, err = s.RetentionMark(ctx, store.RetainArtifacts)
		noErr(t, err, "RetentionMark")
		if !m.EndedAt.Equal(want.EndedAt) || m.Seq != want.Seq {
			t.Fatalf("mark %+v, want %+v", m, want)
		}
	}
	m, err = s.RetentionMark(ctx, store.RetainLogs)
	noErr(t, err, "RetentionMark")
	equal(t, m, store.RetentionMark{}, "another kind's mark")
}

func testPruneAudit(t *testing.T, s store.Store) {
	ctx := t.Context()
	for i := range 10 {
		r := rec("test.event")
		r.Time = at(time.Duration(i) * time.Minute)
		noErr(t, s.AppendAudit(ctx, *r), "AppendAudit")
	}
	cp, head, err := s.AuditBounds(ctx)
	noErr(t, err, "AuditBounds")
	equal(t, cp.Seq, int64(0), "checkpoint before any pruning")
	equal(t, cp.Hash, audit.Genesis, "checkpoint hash before any pruning")
	equal(t, head.Seq, int64(10), "head")

	// Records made before minute 6: 0..5, in batches of 4.
	n, cp, err := s.PruneAudit(ctx, at(5*time.Minute+time.Second), 4)
	noErr(t, err, "PruneAudit")
	equal(t, n, 4, "first batch")
	n, cp, err = s.PruneAudit(ctx, at(5*time.Minute+time.Second), 4)
	noErr(t, err, "PruneAudit")
	equal(t, n, 2, "second batch")
	n, _, err = s.PruneAudit(ctx, at(5*time.Minute+time.Second), 4)
	noErr(t, err, "PruneAudit")
	equal(t, n, 0, "nothing more")
	equal(t, cp.Seq, int64(6), "checkpoint")
	if !cp.Time.Equal(at(5 * time.Minute)) {
		t.Fatalf("checkpoint time %s", cp.Time)
	}

	left, err := s.ListAudit(ctx, 0, 0)
	noErr(t, err, "ListAudit")
	if len(left) != 4 || left[0].Seq != 7 {
		t.Fatalf("left %d records from %d", len(left), left[0].Seq)
	}
	noErr(t, audit.VerifyFrom(cp.Seq, cp.Hash, left), "the chain verifies from the checkpoint")
	got, head2, err := s.AuditBounds(ctx)
	noErr(t, err, "AuditBounds")
	equal(t, got, cp, "stored checkpoint")
	equal(t, head2, head, "head unchanged")

	// Appending goes on from the head; pruning everything leaves the head as checkpoint.
	noErr(t, s.AppendAudit(ctx, *rec("after")), "AppendAudit")
	n, cp, err = s.PruneAudit(ctx, at(24*time.Hour), 100)
	noErr(t, err, "PruneAudit all")
	equal(t, n, 5, "pruned the rest")
	_, head, err = s.AuditBounds(ctx)
	noErr(t, err, "AuditBounds")
	equal(t, cp.Seq, head.Seq, "checkpoint reaches the head")
	equal(t, cp.Hash, head.Hash, "checkpoint hash is the head's")
	noErr(t, s.AppendAudit(ctx, *rec("later")), "AppendAudit")
	left, err = s.ListAudit(ctx, 0, 0)
	noErr(t, err, "ListAudit")
	noErr(t, audit.VerifyFrom(cp.Seq, cp.Hash, left), "new records link to the checkpoint")
}

func testSizes(t *testing.T, s store.Store) {
	ctx := t.Context()
	w := newWorker(t, s)
	j := finishedAt(t, s, w, protocol.JobCompleted, at(0))
	appendLog(t, s, j.ID, 1, 0, "hello", 0, 5, false)
	newJob(t, s)
	noErr(t, s.AppendAudit(ctx, *rec("x")), "AppendAudit")
	sz, err := s.Sizes(ctx)
	noErr(t, err, "Sizes")
	equal(t, sz.Rows["jobs"], int64(2), "jobs")
	equal(t, sz.Rows["audit"], int64(1), "audit records")
	equal(t, sz.LogBytes, int64(5), "log bytes")
	for _, table := range []string{"workers", "attempts", "job_logs"} {
		if _, ok := sz.Rows[table]; !ok {
			t.Errorf("no row count for %s: %v", table, sz.Rows)
		}
	}
}

func testRetentionLock(t *testing.T, s store.Store) {
	unlock, ok, err := s.TryRetentionLock(t.Context())
	noErr(t, err, "TryRetentionLock")
	if !ok {
		t.Fatal("the first retention lock was refused")
	}
	unlock()
	unlock, ok, err = s.TryRetentionLock(t.Context())
	noErr(t, err, "TryRetentionLock again")
	if !ok {
		t.Fatal("the lock was not released")
	}
	unlock()
}
