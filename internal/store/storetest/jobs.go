package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/lifecycle"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

var jobTests = []test{
	{"JobRoundTrip", testJobRoundTrip},
	{"JobDefaults", testJobDefaults},
	{"InsertJobReturnsTheStoredJob", testInsertReturnsStored},
	{"JobDuplicate", testJobDuplicate},
	{"JobNotFound", testJobNotFound},
	{"ListJobsFilters", testListJobsFilters},
	{"CountJobs", testCountJobs},
	{"QueuePosition", testQueuePosition},
	{"ListQueued", testListQueued},
	{"GetWorkers", testGetWorkers},
	{"ConcurrentWritersKeepTheirOutcomes", testConcurrentWriters},
}

func testJobRoundTrip(t *testing.T, s store.Store) {
	j := store.Job{
		ID: protocol.NewJobID(), ConfigName: "flux-lora", Config: json.RawMessage(`{"b":2, "a":[1,2]}`),
		Dataloader: json.RawMessage(`[{"id":"x"}]`), HFToken: "hf_secret", Target: protocol.TargetWorker,
		WorkerLabels: map[string]string{"zone": "eu-*"}, GPUCount: 2, MinVRAMGB: 23.9, Priority: 7,
		MaxRetries: 5, TimeoutSeconds: 3600, Status: protocol.JobQueued, Progress: json.RawMessage(`{"step":3}`),
		SubmittedBy: "admin:tok", Team: "nlp", CreatedAt: t0, UpdatedAt: at(time.Second),
	}
	got, err := s.InsertJob(t.Context(), j, rec("job.submit"))
	noErr(t, err, "InsertJob")
	if got.Seq <= 0 {
		t.Fatalf("Seq = %d, want > 0", got.Seq)
	}
	j.Seq = got.Seq
	equal(t, got, j, "InsertJob result")
	equal(t, getJob(t, s, j.ID), j, "GetJob")

	// Submission numbers increase.
	prev := j.Seq
	for i := 0; i < 3; i++ {
		n := newJob(t, s)
		if n.Seq <= prev {
			t.Fatalf("Seq %d after %d", n.Seq, prev)
		}
		prev = n.Seq
	}
	if recs := chain(t, s); len(recs) != 1 || recs[0].Action != "job.submit" {
		t.Fatalf("audit after InsertJob: %+v", recs)
	}
}

func testJobDefaults(t *testing.T, s store.Store) {
	before := time.Now().Add(-time.Second)
	got, err := s.InsertJob(t.Context(), store.Job{ConfigName: "c"}, nil)
	noErr(t, err, "InsertJob")
	if got.ID == "" || got.Status != protocol.JobQueued || got.CreatedAt.Before(before) ||
		!got.UpdatedAt.Equal(got.CreatedAt) || string(got.Config) != "{}" || got.Dataloader != nil ||
		got.Progress != nil || got.Attempt != 0 || got.WorkerID != "" || got.StartedAt != nil || got.EndedAt != nil {
		t.Fatalf("defaults: %+v", got)
	}
	if got.CreatedAt.Location() != time.UTC {
		t.Fatalf("times must come back in UTC, got %v", got.CreatedAt.Location())
	}
	equal(t, getJob(t, s, got.ID), got, "GetJob")
}

// What InsertJob hands back is what a read returns: times at stored
// precision in UTC, empty JSON values as the store keeps them.
func testInsertReturnsStored(t *testing.T, s store.Store) {
	zone := time.FixedZone("UTC+5:30", 5*3600+1800)
	odd := time.Date(2030, 1, 2, 3, 4, 5, 123456789, zone)
	got, err := s.InsertJob(t.Context(), store.Job{ConfigName: "c", Config: json.RawMessage{},
		Dataloader: json.RawMessage{}, Progress: json.RawMessage{}, CreatedAt: odd, UpdatedAt: odd.Add(time.Nanosecond),
		StartedAt: &odd, AckDeadline: &odd}, nil)
	noErr(t, err, "InsertJob")
	equal(t, got, getJob(t, s, got.ID), "InsertJob result")
}

func testJobDuplicate(t *testing.T, s store.Store) {
	j := newJob(t, s)
	_, err := s.InsertJob(t.Context(), store.Job{ID: j.ID, Config: j.Config}, rec("job.submit"))
	wantErr(t, err, store.ErrDuplicate, "InsertJob with an existing id")
	if n := len(chain(t, s)); n != 0 {
		t.Fatalf("failed insert appended %d audit records", n)
	}
}

func testJobNotFound(t *testing.T, s store.Store) {
	ctx := t.Context()
	_, err := s.GetJob(ctx, "j_missing")
	wantErr(t, err, store.ErrNotFound, "GetJob")
	_, err = s.ListAttempts(ctx, "j_missing")
	wantErr(t, err, store.ErrNotFound, "ListAttempts")
	_, err = s.TransitionJob(ctx, store.JobTransition{JobID: "j_missing", From: protocol.JobQueued,
		Step: lifecycle.Step{To: protocol.JobCancelled, By: lifecycle.Cancel}, Now: t0})
	wantErr(t, err, store.ErrNotFound, "TransitionJob")
	_, _, err = s.AppendLog(ctx, "j_missing", 1, 0, []byte("x"), 0)
	wantErr(t, err, store.ErrNotFound, "AppendLog")
	_, err = s.ReadLog(ctx, "j_missing", store.LogCursor{}, 0)
	wantErr(t, err, store.ErrNotFound, "ReadLog")
	// A job that exists but has no attempts or logs is not an error.
	j := newJob(t, s)
	as, err := s.ListAttempts(ctx, j.ID)
	if err != nil || len(as) != 0 {
		t.Fatalf("ListAttempts of an unclaimed job = %v, %v", as, err)
	}
	chunks, err := s.ReadLog(ctx, j.ID, store.LogCursor{}, 0)
	if err != nil || len(chunks) != 0 {
		t.Fatalf("ReadLog of a silent job = %v, %v", chunks, err)
	}
}

func testListJobsFilters(t *testing.T, s store.Store) {
	w1, w2 := newWorker(t, s), newWorker(t, s)
	// Priorities must not affect list order: lists are by submission.
	var ids []string
	for i := 0; i < 6; i++ {
		ids = append(ids, newJob(t, s, func(j *store.Job) { j.Priority = 6 - i }).ID)
	}
	claim(t, s, w1.ID) // ids[0] (highest priority)
	claim(t, s, w2.ID) // ids[1]
	c := getJob(t, s, ids[5])
	transition(t, s, c, store.JobTransition{Step: lifecycle.Step{To: protocol.JobCancelled, By: lifecycle.Cancel}})

	jobIDs := func(js []store.Job) []string {
		var out []string
		for _, j := range js {
			out = append(out, j.ID)
		}
		return out
	}
	cases := []struct {
		f     store.JobFilter
		want  []string
		total int
	}{
		{store.JobFilter{}, ids, 6},
		{store.JobFilter{Limit: 4, Offset: 1}, ids[1:5], 6},
		{store.JobFilter{Offset: 5}, ids[5:], 6},
		{store.JobFilter{Limit: 2, Offset: 6}, nil, 6},
		{store.JobFilter{Statuses: []protocol.JobStatus{protocol.JobQueued}}, ids[2:5], 3},
		{store.JobFilter{Statuses: []protocol.JobStatus{protocol.JobQueued}, Limit: 1, Offset: 1}, ids[3:4], 3},
		{store.JobFilter{Statuses: []protocol.JobStatus{protocol.JobDispatched, protocol.JobCancelled}}, []string{ids[0], ids[1], ids[5]}, 3},
		{store.JobFilter{WorkerID: w2.ID}, ids[1:2], -1}, // by worker: not counted
		{store.JobFilter{WorkerID: w2.ID, Statuses: []protocol.JobStatus{protocol.JobRunning}}, nil, -1},
	}
	for _, c := range cases {
		js, total, err := s.ListJobs(t.Context(), c.f)
		noErr(t, err, "ListJobs")
		equal(t, jobIDs(js), c.want, fmt.Sprintf("ListJobs(%+v) ids", c.f))
		equal(t, total, c.total, fmt.Sprintf("ListJobs(%+v) total", c.f))
	}
}

func testCountJobs(t *testing.T, s store.Store) {
	counts, err := s.CountJobs(t.Context())
	noErr(t, err, "CountJobs")
	if len(counts) != 0 {
		t.Fatalf("empty store counts %v", counts)
	}
	w := newWorker(t, s)
	for i := 0; i < 3; i++ {
		newJob(t, s)
	}
	claim(t, s, w.ID)
	counts, err = s.CountJobs(t.Context())
	noErr(t, err, "CountJobs")
	equal(t, counts, map[protocol.JobStatus]int{protocol.JobQueued: 2, protocol.JobDispatched: 1}, "CountJobs")
}

func testQueuePosition(t *testing.T, s store.Store) {
	w := newWorker(t, s)
	low := newJob(t, s, func(j *store.Job) { j.Priority = 5 })
	a := newJob(t, s, func(j *store.Job) { j.Priority = 10 })
	b := newJob(t, s, func(j *store.Job) { j.Priority = 10 })
	high := newJob(t, s, func(j *store.Job) { j.Priority = 20 })
	claim(t, s, w.ID) // takes high: claimed jobs no longer count
	// Positions a job not (yet) in the queue would have: a priority no
	// queued job has, and the newest of a priority some have.
	between := store.Job{Priority: 15, Seq: b.Seq + 100}
	newest := store.Job{Priority: 10, Seq: b.Seq + 100}
	for _, c := range []struct {
		j    store.Job
		want int
	}{{high, 0}, {a, 0}, {b, 1}, {low, 2}, {between, 0}, {newest, 2}} {
		got, err := s.QueuePosition(t.Context(), c.j.Priority, c.j.Seq)
		noErr(t, err, "QueuePosition")
		if got != c.want {
			t.Fatalf("QueuePosition(%d, %d) = %d, want %d", c.j.Priority, c.j.Seq, got, c.want)
		}
	}
}

// ListQueued lists only queued jobs, in claim order, up to the limit, each
// with its placement fields as stored.
func testListQueued(t *testing.T, s store.Store) {
	w := newWorker(t, s)
	low := newJob(t, s, func(j *store.Job) { j.Priority = 5 })
	a := newJob(t, s, func(j *store.Job) {
		j.Priority, j.Target, j.GPUCount, j.MinVRAMGB = 10, protocol.TargetWorker, 2, 23.9
		j.WorkerLabels, j.HFToken = map[string]string{"zone": "eu-*"}, "hf_secret"
	})
	b := newJob(t, s, func(j *store.Job) { j.Priority, j.Target = 10, protocol.TargetLocal })
	high := newJob(t, s, func(j *store.Job) { j.Priority = 20 })
	claimed := newJob(t, s, func(j *store.Job) { j.Priority = 30 })
	if got, _ := claim(t, s, w.ID); got.ID != claimed.ID {
		t.Fatalf("claimed %s, want %s", got.ID, claimed.ID)
	}
	want := []store.QueuedJob{high.Queued(), a.Queued(), b.Queued(), low.Queued()}
	got, err := s.ListQueued(t.Context(), nil, 10)
	noErr(t, err, "ListQueued")
	equal(t, got, want, "ListQueued")
	got, err = s.ListQueued(t.Context(), nil, 2)
	noErr(t, err, "ListQueued with a limit")
	equal(t, got, want[:2], "ListQueued with a limit")
	// Pages continue behind their last job, across a priority and within one.
	for i, after := range want[:3] {
		got, err = s.ListQueued(t.Context(), &after, 10)
		noErr(t, err, "ListQueued after a job")
		equal(t, got, want[i+1:], fmt.Sprintf("ListQueued after job %d", i))
	}
}

// GetWorkers reads the workers named, over several pages of its query, and
// leaves out the IDs with no worker.
func testGetWorkers(t *testing.T, s store.Store) {
	want := map[string]store.Worker{}
	var ids []string
	for range 40 {
		w := newWorker(t, s)
		want[w.ID] = w
		ids = append(ids, w.ID)
	}
	ids = append(ids, "w_missing", ids[0])
	got, err := s.GetWorkers(t.Context(), ids)
	noErr(t, err, "GetWorkers")
	byID := map[string]store.Worker{}
	for _, w := range got {
		byID[w.ID] = w
	}
	equal(t, len(got), len(want), "workers read")
	equal(t, byID, want, "workers read")
	got, err = s.GetWorkers(t.Context(), []string{ids[3]})
	noErr(t, err, "GetWorkers of one")
	equal(t, got, []store.Worker{want[ids[3]]}, "one worker")
	got, err = s.GetWorkers(t.Context(), nil)
	noErr(t, err, "GetWorkers of none")
	equal(t, len(got), 0, "workers read for no ID")

	// With statuses, only the workers in one of them.
	busy := newWorker(t, s, func(w *store.Worker) { w.Status = protocol.WorkerBusy })
	offline := newWorker(t, s, func(w *store.Worker) { w.Status = protocol.WorkerOffline })
	got, err = s.GetWorkers(t.Context(), append(ids, busy.ID, offline.ID), protocol.WorkerIdle, protocol.WorkerOffline)
	noErr(t, err, "GetWorkers by status")
	byID = map[string]store.Worker{}
	for _, w := range got {
		byID[w.ID] = w
	}
	want[offline.ID] = offline
	equal(t, byID, want, "idle and offline workers read")
	got, err = s.GetWorkers(t.Context(), []string{ids[0], busy.ID}, protocol.WorkerBusy)
	noErr(t, err, "GetWorkers of busy ones")
	equal(t, got, []store.Worker{busy}, "busy workers read")
}

// Writes arriving together each keep their own outcome, whether or not the
// engine commits them together: a duplicate fails alone, a writer whose
// context ended before its turn changes nothing, the rest are stored with
// their audit records in one unbroken chain.
func testConcurrentWriters(t *testing.T, s store.Store) {
	first := newJob(t, s)
	const n = 60
	type outcome struct {
		id  string
		err error
	}
	out := make(chan outcome, n)
	for i := range n {
		go func() {
			j := store.Job{ID: protocol.NewJobID(), ConfigName: "cfg", Config: json.RawMessage(`{}`),
				Target: protocol.TargetAuto, GPUCount: 1, Status: protocol.JobQueued, SubmittedBy: "admin:t", CreatedAt: t0}
			ctx := t.Context()
			switch i % 6 {
			case 1:
				j.ID = first.ID
			case 2:
				c, cancel := context.WithCancel(ctx)
				cancel()
				ctx = c
			}
			_, err := s.InsertJob(ctx, j, rec("job.submit"))
			out <- outcome{j.ID, err}
		}()
	}
	stored := 1
	for range n {
		o := <-out
		_, getErr := s.GetJob(t.Context(), o.id)
		switch {
		case o.err == nil:
			stored++
			noErr(t, getErr, "GetJob of a stored job")
		case errors.Is(o.err, store.ErrDuplicate):
			if o.id != first.ID {
				t.Errorf("job %s: %v", o.id, o.err)
			}
		case errors.Is(o.err, context.Canceled):
			if !errors.Is(getErr, store.ErrNotFound) {
				t.Errorf("job %s of a cancelled writer: GetJob = %v", o.id, getErr)
			}
		default:
			t.Errorf("job %s: %v", o.id, o.err)
		}
	}
	if want := 1 + n - 2*n/6; stored != want {
		t.Errorf("%d jobs stored, want %d", stored, want)
	}
	counts, err := s.CountJobs(t.Context())
	noErr(t, err, "CountJobs")
	if counts[protocol.JobQueued] != stored {
		t.Errorf("queued count %d, %d stored", counts[protocol.JobQueued], stored)
	}
	if recs := chain(t, s); len(recs) != stored-1 { // newJob writes no audit record
		t.Errorf("%d audit records for %d submits", len(recs), stored-1)
	}
}
