package scheduler

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/fairshare"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/hub"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/logfeed"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/metrics"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/transitions"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/store/storetest"
)

// newTestScheduler is a scheduler over a fresh SQLite store whose moves are
// the real ones, with no teams.
func newTestScheduler(t *testing.T) (*Scheduler, store.Store, *hub.Hub) {
	st := storetest.Open(t, "sqlite")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := hub.New(log)
	m := metrics.New()
	notify := &transitions.Notifier{Hub: h, Bus: st, Log: log, Wake: func() {}, Resync: func(context.Context) {},
		InstanceID: func() string { return "test" }}
	moves := &transitions.Mover{Store: st, Notify: notify, Log: log, Metrics: m, LogFeed: logfeed.New(),
		Options: func() transitions.Options { return transitions.Options{} }, DiskFull: func(error) bool { return false },
		NoteStore: func(error) {}}
	s := &Scheduler{Store: st, Streams: h, Moves: moves, Log: log, Metrics: m,
		CheckpointsEndpoint: func(store.Job) string { return "" }, Stopping: func() bool { return false },
		Freeze: func(context.Context) {}, NoteStore: func(error) {}, DiskFull: func(error) bool { return false }}
	s.Init(Options{Interval: time.Hour, AckTimeout: time.Minute, Teams: fairshare.Policy{}})
	return s, st, h
}

// A pass in the queue's own order gives the one free GPU to the job of
// highest priority, sends it on the worker's stream, and holds nothing for
// the job behind it (only the head of the queue may take a reservation).
func TestPassPlacesTheHighestPriorityFirst(t *testing.T) {
	s, st, h := newTestScheduler(t)
	ctx := t.Context()
	w := store.Worker{ID: protocol.NewWorkerID(), Name: "one-gpu", Type: protocol.Persistent, Status: protocol.WorkerIdle,
		GPUInfo: store.ReadGPUInfo(json.RawMessage(`{"count":1}`)), CreatedAt: time.Now().UTC(), CreatedBy: "admin:t"}
	if err := st.CreateWorker(ctx, w, "hash", nil); err != nil {
		t.Fatal(err)
	}
	stream := h.Attach(w.ID, "hash")
	submit := func(priority int) string {
		j, err := st.InsertJob(ctx, store.Job{ID: protocol.NewJobID(), ConfigName: "cfg", Config: json.RawMessage(`{}`),
			Target: protocol.TargetAuto, GPUCount: 1, MaxRetries: 3, Status: protocol.JobQueued, Priority: priority,
			SubmittedBy: "admin:t", CreatedAt: time.Now().UTC()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return j.ID
	}
	low := submit(1)
	high := submit(50)

	s.Pass(ctx)

	select {
	case out := <-stream.Events():
		if out.JobID != high {
			t.Fatalf("job_submit for %s, want the high-priority %s", out.JobID, high)
		}
	default:
		t.Fatal("the pass sent no job_submit")
	}
	if j, err := st.GetJob(ctx, low); err != nil || j.Status != protocol.JobQueued {
		t.Fatalf("the low-priority job: %v %v, want it still queued", j.Status, err)
	}
	if j, err := st.GetJob(ctx, high); err != nil || j.Status != protocol.JobDispatched || j.WorkerID != w.ID {
		t.Fatalf("the high-priority job: %v on %q (%v), want dispatched on %s", j.Status, j.WorkerID, err, w.ID)
	}
	if res := s.Reservation(); res.JobID != "" {
		t.Fatalf("reservation %+v for a job behind the head of the queue", res)
	}
	if n := s.Metrics.Dispatches.Load(); n != 1 {
		t.Fatalf("%d dispatches counted, want 1", n)
	}
}
