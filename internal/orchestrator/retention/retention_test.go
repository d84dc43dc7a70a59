package retention

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/artifacts"
	"github.com/simpletuner/simpletuner-orchestration/internal/lifecycle"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/store/storetest"
)

// keeper is retention over a real SQLite store with the given options.
func keeper(t *testing.T, opt Options) (*Keeper, store.Store) {
	st := storetest.Open(t, "sqlite")
	t.Cleanup(func() { st.Close() })
	k := &Keeper{Store: st, Artifacts: func() *artifacts.Store { return nil }, Log: slog.New(slog.DiscardHandler),
		Options: func() Options { return opt }, StartupGrace: func() time.Duration { return 0 },
		Quiet: func(error) bool { return false }}
	return k, st
}

// job makes a job on w and takes it to end at ended (running when ended is
// zero).
func job(t *testing.T, st store.Store, w store.Worker, ended time.Time) store.Job {
	t.Helper()
	ctx := t.Context()
	j, err := st.InsertJob(ctx, store.Job{ID: protocol.NewJobID(), Config: json.RawMessage(`{}`), Target: protocol.TargetAuto,
		Status: protocol.JobQueued, CreatedAt: time.Now().Add(-3 * time.Hour)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now().Add(-2 * time.Hour)
	if j, _, err = st.ClaimJob(ctx, store.ClaimRequest{WorkerID: w.ID, JobID: j.ID, UploadTokenHash: "up",
		AckDeadline: start.Add(time.Minute), Now: start}); err != nil {
		t.Fatal(err)
	}
	if ended.IsZero() {
		return j
	}
	j, err = st.TransitionJob(ctx, store.JobTransition{JobID: j.ID, ExpectAttempt: j.Attempt, From: j.Status, Now: ended,
		Step: lifecycle.Step{To: protocol.JobCompleted, By: lifecycle.Report, EndAttempt: protocol.OutcomeCompleted}})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// A pass deletes the jobs that ended before their period, and never one
// that has not ended; the metrics say what went.
func TestPassDeletesOnlyWhatExpired(t *testing.T) {
	k, st := keeper(t, Options{Jobs: time.Hour, Interval: time.Hour, BatchSize: 1})
	w := store.Worker{ID: protocol.NewWorkerID(), Name: "w", Type: protocol.Persistent, Status: protocol.WorkerIdle,
		GPUInfo: store.ReadGPUInfo(json.RawMessage(`{"count":8}`)), Protocol: 2, Capabilities: protocol.Capabilities{MaxJobs: 8}}
	if err := st.CreateWorker(t.Context(), w, "hash", nil); err != nil {
		t.Fatal(err)
	}
	old := []store.Job{job(t, st, w, time.Now().Add(-90*time.Minute)), job(t, st, w, time.Now().Add(-80*time.Minute))}
	recent := job(t, st, w, time.Now().Add(-time.Minute))
	running := job(t, st, w, time.Time{})

	k.Pass(t.Context())
	for _, j := range old {
		if _, err := st.GetJob(t.Context(), j.ID); err == nil {
			t.Errorf("job %s ended 80+ minutes ago, kept an hour: still there", j.ID)
		}
	}
	for _, j := range []store.Job{recent, running} {
		if _, err := st.GetJob(t.Context(), j.ID); err != nil {
			t.Errorf("job %s deleted: %v", j.ID, err)
		}
	}
	var out bytes.Buffer
	counts := map[string]int64{}
	k.WriteMetrics(&out, func(name, _ string, v int64) { counts[name] = v }, func(name, _ string, v int64) { counts[name] = v })
	if counts["simpletuner_retention_passes_total"] != 1 || !strings.Contains(out.String(), `simpletuner_retention_deleted_total{kind="jobs"} 2`) {
		t.Fatalf("metrics after the pass: %v\n%s", counts, out.String())
	}
}

// Periods of 0 keep everything: a pass does nothing at all.
func TestNothingExpiresByDefault(t *testing.T) {
	k, st := keeper(t, Options{Interval: time.Hour, BatchSize: 100})
	w := store.Worker{ID: protocol.NewWorkerID(), Name: "w", Type: protocol.Persistent, Status: protocol.WorkerIdle,
		GPUInfo: store.ReadGPUInfo(json.RawMessage(`{"count":1}`))}
	if err := st.CreateWorker(t.Context(), w, "hash", nil); err != nil {
		t.Fatal(err)
	}
	j := job(t, st, w, time.Now().Add(-24*365*time.Hour))
	k.Pass(t.Context())
	if _, err := st.GetJob(t.Context(), j.ID); err != nil {
		t.Fatalf("a year-old job deleted with no retention set: %v", err)
	}
	if k.metrics.passes.Load() != 0 {
		t.Fatal("a pass ran with nothing to expire")
	}
}
