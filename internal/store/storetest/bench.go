package storetest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/lifecycle"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// BenchJobCycle measures the store's part of one job's life as the
// orchestrator drives it: submit, claim, the worker's acknowledgement and
// its terminal report, each with its audit record, and the reads around
// them (the job before each report, the worker the claim goes to). It is
// the store's share of a zero-work job, without HTTP.
func BenchJobCycle(b *testing.B, s store.Store) {
	ctx := b.Context()
	w := store.Worker{ID: protocol.NewWorkerID(), Name: "bench", Type: protocol.Persistent,
		Status: protocol.WorkerIdle, GPUInfo: store.ReadGPUInfo(json.RawMessage(`{"count":1}`)), CreatedBy: "admin:bench"}
	if err := s.CreateWorker(ctx, w, randHex(), nil); err != nil {
		b.Fatal(err)
	}
	report := func(id string, step lifecycle.Step) {
		j, err := s.GetJob(ctx, id)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.TransitionJob(ctx, store.JobTransition{JobID: id, ExpectAttempt: j.Attempt, ExpectWorker: w.ID,
			From: j.Status, Step: step, Audit: rec("job.transition")}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		j, err := s.InsertJob(ctx, store.Job{ConfigName: "bench", Config: json.RawMessage(`{"steps":1}`),
			MaxRetries: 3, SubmittedBy: "admin:bench"}, rec("job.submit"))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.GetWorker(ctx, w.ID); err != nil {
			b.Fatal(err)
		}
		if _, _, err := s.ClaimJob(ctx, store.ClaimRequest{WorkerID: w.ID, JobID: j.ID, UploadTokenHash: "up",
			AckDeadline: time.Now().Add(time.Minute), Audit: rec("job.dispatch")}); err != nil {
			b.Fatal(err)
		}
		report(j.ID, lifecycle.Step{To: protocol.JobRunning, By: lifecycle.Report, Ack: true})
		report(j.ID, lifecycle.Step{To: protocol.JobCompleted, By: lifecycle.Report, EndAttempt: protocol.OutcomeCompleted})
	}
}

// BenchWorkerTokenLookup compares the worker requests' token lookups on a
// worker row as workerd registers it (labels, capabilities, GPUs): the
// whole row, and the part the job reports read.
func BenchWorkerTokenLookup(b *testing.B, s store.Store) {
	ctx := b.Context()
	w := store.Worker{ID: protocol.NewWorkerID(), Name: "bench", Type: protocol.Persistent, Status: protocol.WorkerBusy,
		GPUInfo:  store.ReadGPUInfo(json.RawMessage(`{"name":"A100","vram_gb":80,"count":8}`)),
		Provider: "local", Labels: map[string]string{"zone": "eu", "tier": "gold"}, AdminLabels: map[string]string{"tier": "gold"},
		Protocol: 2, AgentVersion: "1.2.3", LastHeartbeat: ptr(time.Now()), ConnectedAt: ptr(time.Now()),
		Capabilities: protocol.Capabilities{CancelGraceSeconds: 5}, CreatedBy: "admin:bench"}
	hash := randHex()
	if err := s.CreateWorker(ctx, w, hash, nil); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		lookup func(context.Context, string) (store.Worker, error)
	}{{"whole", s.GetWorkerByTokenHash}, {"reporting", s.GetReportingWorkerByTokenHash}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.lookup(ctx, hash); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TeamListJobs is how many jobs InsertTeamJobs inserts for BenchTeamList,
// and teamListShare how they are spread: of every 20 jobs, 1 is alpha's, 3 bravo's, 6
// charlie's and 10 delta's.
const TeamListJobs = 20000

var teamListShare = [20]string{"alpha", "bravo", "bravo", "bravo",
	"charlie", "charlie", "charlie", "charlie", "charlie", "charlie",
	"delta", "delta", "delta", "delta", "delta", "delta", "delta", "delta", "delta", "delta"}

// BenchTeamList compares the first page of GET /api/queue (50 jobs, newest
// first, with the total) as the fleet's admin reads it (every team) with
// what a member walled into their teams reads: a small team, a large one,
// and two teams together. InsertTeamJobs fills the store first.
func BenchTeamList(b *testing.B, s store.Store) {
	ctx := b.Context()
	for _, c := range []struct {
		name  string
		teams []string
	}{
		{"fleet", nil},
		{"team=alpha(5%)", []string{"alpha"}},
		{"team=delta(50%)", []string{"delta"}},
		{"teams=alpha+bravo(20%)", []string{"alpha", "bravo"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				page, total, err := s.ListJobs(ctx, store.JobFilter{Teams: c.teams, Limit: 50, Newest: true})
				if err != nil {
					b.Fatal(err)
				}
				if len(page) != 50 || total < 50 {
					b.Fatalf("a page of %d jobs of %d", len(page), total)
				}
			}
		})
	}
}

// InsertTeamJobs inserts n queued jobs spread over the teams of
// teamListShare, from several writers at once (the engines commit
// concurrent writes together).
func InsertTeamJobs(b *testing.B, s store.Store, n int) {
	const writers = 16
	errs := make(chan error, writers)
	for w := range writers {
		go func() {
			var err error
			for i := w; i < n && err == nil; i += writers {
				_, err = s.InsertJob(b.Context(), store.Job{ID: protocol.NewJobID(), ConfigName: "bench",
					Config: json.RawMessage(`{"steps":1}`), Target: protocol.TargetAuto, GPUCount: 1, MaxRetries: 3,
					Status: protocol.JobQueued, Team: teamListShare[i%len(teamListShare)], SubmittedBy: "admin:bench",
					CreatedAt: time.Now()}, nil)
			}
			errs <- err
		}()
	}
	for range writers {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
}

// BenchReleaseDependents measures the end of a job that n waiting jobs
// depend on: the one transaction that cancels it and moves each of them
// to the queue (their counts, audit records and events with it). One
// op is one such end, so ns/op is how long a cancel (or a worker's final
// report) of a job with n dependents takes.
func BenchReleaseDependents(b *testing.B, s store.Store, n int) {
	ctx := b.Context()
	for b.Loop() {
		b.StopTimer()
		dep, err := s.InsertJob(ctx, store.Job{Config: json.RawMessage(`{}`), SubmittedBy: "admin:bench"}, nil)
		if err != nil {
			b.Fatal(err)
		}
		for range n {
			if _, err := s.InsertJob(ctx, store.Job{Config: json.RawMessage(`{}`), SubmittedBy: "admin:bench",
				DependsOn: []lifecycle.Dependency{{JobID: dep.ID, When: lifecycle.AfterAny}}}, nil); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		if _, err := s.TransitionJob(ctx, store.JobTransition{JobID: dep.ID, From: protocol.JobQueued,
			Step: lifecycle.Step{To: protocol.JobCancelled, By: lifecycle.Cancel}, Audit: rec("job.transition")}); err != nil {
			b.Fatal(err)
		}
	}
}
