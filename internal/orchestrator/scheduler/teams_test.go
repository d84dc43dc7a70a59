package scheduler

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/lifecycle"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/fairshare"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// afterFirstActiveRead is a store that runs a hook once, right after the
// first read of the active attempts: what happens between the start of a
// pass and its preemption step.
type afterFirstActiveRead struct {
	store.Store
	once sync.Once
	hook func()
}

func (s *afterFirstActiveRead) ListActiveAttempts(ctx context.Context) ([]store.ActiveAttempt, error) {
	out, err := s.Store.ListActiveAttempts(ctx)
	s.once.Do(s.hook)
	return out, err
}

// A job acknowledged after a pass has begun, but before the job it is
// preempted for was submitted, counts as started: the victim is the most
// recently started job, not the one the pass saw running when it began.
func TestPreemptionWeighsTheJobsRunningWhenItChooses(t *testing.T) {
	s, st, h := newTestScheduler(t)
	ctx := t.Context()
	cfg := config.DefaultOrchestrator()
	cfg.Teams = []config.TeamConfig{{Name: "flood", Share: 1}, {Name: "late", Share: 1}}
	cfg.Jobs.MinRuntime.Duration = 0
	s.SetOptions(Options{Interval: time.Hour, AckTimeout: time.Minute, Teams: fairshare.PolicyFrom(cfg)})

	now := time.Now().UTC()
	worker := func(name string) store.Worker {
		w := store.Worker{ID: protocol.NewWorkerID(), Name: name, Type: protocol.Persistent, Status: protocol.WorkerIdle,
			GPUInfo: store.ReadGPUInfo(json.RawMessage(`{"count":1}`)), CreatedAt: now, CreatedBy: "admin:t"}
		if err := st.CreateWorker(ctx, w, "hash-"+name, nil); err != nil {
			t.Fatal(err)
		}
		h.Attach(w.ID, "hash-"+name)
		return w
	}
	submit := func(team string) store.Job {
		j, err := st.InsertJob(ctx, store.Job{ID: protocol.NewJobID(), ConfigName: "cfg", Config: json.RawMessage(`{}`),
			Target: protocol.TargetAuto, GPUCount: 1, MaxRetries: 3, Status: protocol.JobQueued, Team: team,
			SubmittedBy: "admin:t", CreatedAt: time.Now().UTC()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	claim := func(j store.Job, w store.Worker) store.Job {
		j, _, err := st.ClaimJob(ctx, store.ClaimRequest{WorkerID: w.ID, JobID: j.ID, GPUs: []int{0}, UploadTokenHash: "up",
			AckDeadline: now.Add(time.Hour), Now: now.Add(-2 * time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	ack := func(j store.Job, at time.Time) {
		if _, err := st.TransitionJob(ctx, store.JobTransition{JobID: j.ID, ExpectAttempt: j.Attempt, From: protocol.JobDispatched,
			Step: lifecycle.Step{To: protocol.JobRunning, By: lifecycle.Report, Ack: true}, Now: at}); err != nil {
			t.Fatal(err)
		}
	}
	a, b := worker("a"), worker("b")
	first := claim(submit("flood"), a)
	ack(first, now.Add(-time.Minute))
	second := claim(submit("flood"), b)

	// The pass reads the running jobs with b's still unacknowledged; b
	// then acknowledges, and the late team's job arrives.
	var lateJob store.Job
	s.Store = &afterFirstActiveRead{Store: st, hook: func() {
		ack(second, time.Now().UTC())
		lateJob = submit("late")
	}}
	s.Pass(ctx)

	got, err := st.GetJob(ctx, second.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != protocol.JobCanceling || got.PreemptedBy == "" {
		t.Fatalf("b's job (started last) is %s, preempted by %q; want it preempted for %s", got.Status, got.PreemptedBy, lateJob.ID)
	}
	if got, err := st.GetJob(ctx, first.ID); err != nil || got.Status != protocol.JobRunning {
		t.Fatalf("a's job (started first) is %s (%v), want it left running", got.Status, err)
	}
}
