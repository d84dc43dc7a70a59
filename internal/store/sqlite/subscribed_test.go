package sqlite

import (
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// askedOutbox counts the changes it was asked to turn into events.
type askedOutbox struct{ asked atomic.Int64 }

func (o *askedOutbox) event(typ, id string) []store.OutboxEvent {
	o.asked.Add(1)
	return []store.OutboxEvent{{ID: "evt_" + id + typ, Type: typ, Key: "job:" + id, Team: "default", Time: time.Now(), Payload: json.RawMessage(`{}`)}}
}
func (o *askedOutbox) JobInserted(j store.Job) []store.OutboxEvent {
	return o.event("job.queued", j.ID)
}
func (o *askedOutbox) JobMoved(_, after store.Job, _ *store.JobTransition) []store.OutboxEvent {
	return o.event("job."+string(after.Status), after.ID)
}
func (o *askedOutbox) WorkerChanged(_, _ store.Worker, _ *audit.Record) []store.OutboxEvent {
	return nil
}
func (o *askedOutbox) CheckpointKept(j store.Job, _ store.Checkpoint) []store.OutboxEvent {
	return o.event("checkpoint.saved", j.ID)
}
func (o *askedOutbox) Committed() {}

// With no subscription, a submit's transaction neither builds its event nor
// looks for subscribers: on the single writer every job's launch waits
// behind it. Once one exists, the next change is asked again.
func TestOutboxNotAskedWithoutSubscriptions(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	ctx := t.Context()
	o := &askedOutbox{}
	s.SetOutbox(o)
	insert := func() {
		t.Helper()
		j := store.Job{ID: protocol.NewJobID(), Config: json.RawMessage(`{}`), Target: protocol.TargetAuto, Status: protocol.JobQueued}
		if _, err := s.InsertJob(ctx, j, nil); err != nil {
			t.Fatal(err)
		}
	}
	insert()
	insert()
	if n := o.asked.Load(); n != 0 {
		t.Fatalf("the outbox was asked for %d events with no subscription", n)
	}
	w := store.Webhook{ID: "wh_1", Name: "one", URL: "https://example.test/", Events: []string{"*"}, Format: "json", Secret: "s3cret-one"}
	if err := s.CreateWebhook(ctx, w, nil); err != nil {
		t.Fatal(err)
	}
	insert()
	if n := o.asked.Load(); n != 1 {
		t.Fatalf("the outbox was asked %d times after a subscription was made, want 1", n)
	}
	if err := s.DeleteWebhook(ctx, w.ID, nil); err != nil {
		t.Fatal(err)
	}
	insert()
	if n := o.asked.Load(); n != 1 {
		t.Fatalf("the outbox was asked %d times after the subscription was deleted, want still 1", n)
	}
}
