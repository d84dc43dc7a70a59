package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/lifecycle"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

var webhookTests = []test{
	{"WebhookCRUD", testWebhookCRUD},
	{"WebhookSyncConfig", testWebhookSyncConfig},
	{"OutboxWithItsChange", testOutboxWithItsChange},
	{"OutboxNotWithAFailedChange", testOutboxNotWithAFailedChange},
	{"OutboxFilters", testOutboxFilters},
	{"DeliveryOrderPerKey", testDeliveryOrderPerKey},
	{"DeliveryLease", testDeliveryLease},
	{"DeliveryConcurrentClaims", testDeliveryConcurrentClaims},
	{"DeliveryLogAndPrune", testDeliveryLogAndPrune},
	{"OutboxWithACheckpoint", testOutboxWithACheckpoint},
}

// recordingOutbox emits one event per change, named after it, and counts
// the commits it is told of.
type recordingOutbox struct {
	n         atomic.Int64
	committed atomic.Int64
}

func (o *recordingOutbox) event(typ, key string) store.OutboxEvent {
	n := o.n.Add(1)
	return store.OutboxEvent{ID: fmt.Sprintf("evt_%s_%d", randHex()[:8], n), Type: typ, Key: key, Team: "default", Time: t0,
		Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n))}
}

func (o *recordingOutbox) JobInserted(j store.Job) []store.OutboxEvent {
	return []store.OutboxEvent{o.event("job.queued", "job:"+j.ID)}
}

func (o *recordingOutbox) JobMoved(before, after store.Job, t *store.JobTransition) []store.OutboxEvent {
	return []store.OutboxEvent{o.event("job."+string(after.Status), "job:"+after.ID)}
}

func (o *recordingOutbox) WorkerChanged(before, after store.Worker, _ *audit.Record) []store.OutboxEvent {
	if before.Status == after.Status {
		return nil
	}
	e := o.event("worker."+string(after.Status), "worker:"+after.ID)
	e.Team = ""
	return []store.OutboxEvent{e}
}

func (o *recordingOutbox) CheckpointKept(j store.Job, c store.Checkpoint) []store.OutboxEvent {
	return []store.OutboxEvent{o.event("checkpoint.saved", "job:"+j.ID)}
}

func (o *recordingOutbox) Committed() { o.committed.Add(1) }

func newWebhook(t *testing.T, s store.Store, name string, events []string, mod ...func(*store.Webhook)) store.Webhook {
	t.Helper()
	w := store.Webhook{ID: "wh_" + randHex()[:12], Name: name, URL: "https://example.test/" + name, Events: events,
		Format: "json", Secret: "s3cret-" + name, CreatedAt: t0, CreatedBy: "admin:t"}
	for _, m := range mod {
		m(&w)
	}
	noErr(t, s.CreateWebhook(t.Context(), w, rec("webhook.create")), "CreateWebhook")
	got, err := s.GetWebhook(t.Context(), w.ID)
	noErr(t, err, "GetWebhook")
	return got
}

// deliveries lists a subscription's deliveries, oldest first.
func deliveries(t *testing.T, s store.Store, webhookID string) []store.WebhookDelivery {
	t.Helper()
	ds, err := s.ListWebhookDeliveries(t.Context(), store.DeliveryFilter{WebhookID: webhookID})
	noErr(t, err, "ListWebhookDeliveries")
	for i, j := 0, len(ds)-1; i < j; i, j = i+1, j-1 {
		ds[i], ds[j] = ds[j], ds[i]
	}
	return ds
}

// finishDelivery records one outcome on its own.
func finishDelivery(s store.Store, ctx context.Context, o store.DeliveryOutcome) error {
	errs, err := s.FinishWebhookDeliveries(ctx, []store.DeliveryOutcome{o})
	if err != nil {
		return err
	}
	return errs[0]
}

func eventTypes(ds []store.WebhookDelivery) []string {
	out := []string{}
	for _, d := range ds {
		out = append(out, d.EventType)
	}
	return out
}

func testWebhookCRUD(t *testing.T, s store.Store) {
	ctx := t.Context()
	w := newWebhook(t, s, "ops", []string{"job.failed", "worker.*"}, func(w *store.Webhook) { w.Team = "default" })
	equal(t, w.Source, store.WebhookFromAPI, "source")
	equal(t, w.Events, []string{"job.failed", "worker.*"}, "events")
	equal(t, w.Secret, "s3cret-ops", "secret kept as given")
	equal(t, w.CreatedAt, t0, "created_at")
	byName, err := s.GetWebhook(ctx, "ops")
	noErr(t, err, "GetWebhook by name")
	equal(t, byName, w, "read by name")

	dup := w
	dup.ID = "wh_other"
	wantErr(t, s.CreateWebhook(ctx, dup, nil), store.ErrDuplicate, "a second subscription named ops")

	newWebhook(t, s, "alpha", []string{"*"})
	all, err := s.ListWebhooks(ctx)
	noErr(t, err, "ListWebhooks")
	equal(t, len(all), 2, "subscriptions")
	equal(t, all[0].Name, "alpha", "listed by name")
	equal(t, all[1], w, "listed with its events")

	noErr(t, s.DeleteWebhook(ctx, w.ID, rec("webhook.delete")), "DeleteWebhook")
	_, err = s.GetWebhook(ctx, w.ID)
	wantErr(t, err, store.ErrNotFound, "GetWebhook after delete")
	wantErr(t, s.DeleteWebhook(ctx, w.ID, nil), store.ErrNotFound, "DeleteWebhook again")
	recs, err := s.ListAuditNewest(ctx, store.AuditFilter{Action: "webhook."})
	noErr(t, err, "ListAuditNewest")
	equal(t, len(recs), 3, "audit records of two creates and a delete")
}

func testWebhookSyncConfig(t *testing.T, s store.Store) {
	ctx := t.Context()
	var actions []string
	rec := func(action string, w store.Webhook) *audit.Record {
		actions = append(actions, action+" "+w.Name)
		r := audit.New("system", "", action, "webhook", w.ID, audit.Success, map[string]string{"name": w.Name})
		return &r
	}
	a := store.Webhook{ID: "wh_a", Name: "a", URL: "https://a.test/", Events: []string{"job.*"}, Format: "json", Secret: "x"}
	b := store.Webhook{ID: "wh_b", Name: "b", URL: "https://b.test/", Events: []string{"*"}, Format: "slack", Secret: "y"}
	noErr(t, s.SyncConfigWebhooks(ctx, []store.Webhook{a, b}, rec), "first sync")
	equal(t, actions, []string{"webhook.create a", "webhook.create b"}, "first sync")

	actions = nil
	noErr(t, s.SyncConfigWebhooks(ctx, []store.Webhook{a, b}, rec), "the same again")
	equal(t, actions, []string(nil), "an unchanged configuration changes nothing")

	actions = nil
	a2 := a
	a2.ID, a2.Secret, a2.Events = "wh_new", "rotated", []string{"job.failed"}
	noErr(t, s.SyncConfigWebhooks(ctx, []store.Webhook{a2}, rec), "sync without b")
	equal(t, actions, []string{"webhook.update a", "webhook.delete b"}, "second sync")
	got, err := s.GetWebhook(ctx, "a")
	noErr(t, err, "GetWebhook a")
	equal(t, []any{got.ID, got.Secret, got.Events, got.Source}, []any{"wh_a", "rotated", []string{"job.failed"}, store.WebhookFromConfig},
		"an updated subscription keeps its ID")

	newWebhook(t, s, "mine", []string{"*"})
	clash := store.Webhook{ID: "wh_c", Name: "mine", URL: "https://c.test/", Events: []string{"*"}, Format: "json", Secret: "z"}
	wantErr(t, s.SyncConfigWebhooks(ctx, []store.Webhook{a2, clash}, rec), store.ErrDuplicate, "a config name an API subscription holds")
	all, err := s.ListWebhooks(ctx)
	noErr(t, err, "ListWebhooks")
	equal(t, len(all), 2, "a refused sync changes nothing")
}

func testOutboxWithItsChange(t *testing.T, s store.Store) {
	ctx := t.Context()
	o := &recordingOutbox{}
	s.SetOutbox(o)
	wh := newWebhook(t, s, "all", []string{"*"})
	w := newWorker(t, s)
	j := newJob(t, s)
	claimed, _ := claim(t, s, w.ID)
	_, err := s.TransitionJob(ctx, store.JobTransition{JobID: j.ID, ExpectAttempt: claimed.Attempt, From: protocol.JobDispatched,
		Step: lifecycle.Step{To: protocol.JobRunning, By: lifecycle.Report, Ack: true}, Now: at(2 * time.Second)})
	noErr(t, err, "TransitionJob")
	_, err = s.UpdateWorker(ctx, w.ID, func(cur *store.Worker) (*audit.Record, error) {
		cur.Status = protocol.WorkerOffline
		return nil, nil
	})
	noErr(t, err, "UpdateWorker")
	ds := deliveries(t, s, wh.ID)
	equal(t, eventTypes(ds), []string{"job.queued", "job.dispatched", "job.running", "worker.offline"}, "events delivered")
	for _, d := range ds {
		equal(t, d.State, store.DeliveryPending, "a new delivery's state")
		equal(t, d.EventTime, t0, "the event's time")
	}
	equal(t, ds[0].Key, "job:"+j.ID, "a job event's key")
	if o.committed.Load() != 4 {
		t.Fatalf("Committed called %d times, want 4 (once per change that wrote events)", o.committed.Load())
	}
}

func testOutboxNotWithAFailedChange(t *testing.T, s store.Store) {
	ctx := t.Context()
	o := &recordingOutbox{}
	s.SetOutbox(o)
	wh := newWebhook(t, s, "all", []string{"*"})
	w := newWorker(t, s)
	j := newJob(t, s)
	before := len(deliveries(t, s, wh.ID))
	// A compare-and-set that finds another state writes nothing, its event
	// included.
	_, err := s.TransitionJob(ctx, store.JobTransition{JobID: j.ID, ExpectAttempt: 0, From: protocol.JobRunning,
		Step: lifecycle.Step{To: protocol.JobCompleted, By: lifecycle.Report, EndAttempt: protocol.OutcomeCompleted}, Now: t0})
	wantErr(t, err, store.ErrConflict, "TransitionJob from the wrong state")
	_, err = s.UpdateWorker(ctx, w.ID, func(cur *store.Worker) (*audit.Record, error) {
		cur.Status = protocol.WorkerOffline
		return nil, errors.New("changed my mind")
	})
	if err == nil {
		t.Fatal("UpdateWorker: the callback's error was lost")
	}
	equal(t, len(deliveries(t, s, wh.ID)), before, "deliveries after two changes that did not happen")
	if got := o.committed.Load(); got != 1 {
		t.Fatalf("Committed called %d times, want 1 (the insert)", got)
	}
}

func testOutboxFilters(t *testing.T, s store.Store) {
	ctx := t.Context()
	s.SetOutbox(&recordingOutbox{})
	exact := newWebhook(t, s, "exact", []string{"job.queued"})
	family := newWebhook(t, s, "family", []string{"worker.*"})
	team := newWebhook(t, s, "team", []string{"*"}, func(w *store.Webhook) { w.Team = "default" })
	other := newWebhook(t, s, "other", []string{"*"}, func(w *store.Webhook) { w.Team = "vision" })
	w := newWorker(t, s)
	newJob(t, s)
	_, err := s.UpdateWorker(ctx, w.ID, func(cur *store.Worker) (*audit.Record, error) {
		cur.Status = protocol.WorkerOffline
		return nil, nil
	})
	noErr(t, err, "UpdateWorker")
	equal(t, eventTypes(deliveries(t, s, exact.ID)), []string{"job.queued"}, "an exact name")
	equal(t, eventTypes(deliveries(t, s, family.ID)), []string{"worker.offline"}, "a family")
	equal(t, eventTypes(deliveries(t, s, team.ID)), []string{"job.queued", "worker.offline"}, "the job's team, and fleet events")
	equal(t, eventTypes(deliveries(t, s, other.ID)), []string{"worker.offline"}, "another team: fleet events only")

	// Events nobody wants are not kept.
	noErr(t, s.EmitEvents(ctx, []store.OutboxEvent{{ID: "evt_nobody", Type: "checkpoint.saved", Key: "job:x", Team: "vision2", Time: t0,
		Payload: json.RawMessage(`{}`)}}), "EmitEvents")
	for _, wh := range []store.Webhook{exact, family, team} {
		for _, d := range deliveries(t, s, wh.ID) {
			if d.EventID == "evt_nobody" {
				t.Fatalf("%s got an event it does not want", wh.Name)
			}
		}
	}
}

// emitKeyed writes one event per key given, in order, each in its own
// transaction.
func emitKeyed(t *testing.T, s store.Store, keys ...string) []string {
	t.Helper()
	var ids []string
	for i, k := range keys {
		id := fmt.Sprintf("evt_%s_%d", randHex()[:8], i)
		noErr(t, s.EmitEvents(t.Context(), []store.OutboxEvent{{ID: id, Type: "job.queued", Key: k, Time: t0,
			Payload: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}}), "EmitEvents")
		ids = append(ids, id)
	}
	return ids
}

func claimIDs(t *testing.T, s store.Store, owner string, now time.Time, limit int) []string {
	t.Helper()
	ds, err := s.ClaimWebhookDeliveries(t.Context(), owner, now, now.Add(time.Minute), limit)
	noErr(t, err, "ClaimWebhookDeliveries")
	out := []string{}
	for _, d := range ds {
		if d.Webhook.Secret == "" || d.Webhook.URL == "" || len(d.Payload) == 0 {
			t.Fatalf("a claimed delivery lacks its subscription or payload: %+v", d)
		}
		out = append(out, d.EventID)
	}
	return out
}

func testDeliveryOrderPerKey(t *testing.T, s store.Store) {
	ctx := t.Context()
	wh := newWebhook(t, s, "all", []string{"*"})
	ev := emitKeyed(t, s, "job:a", "job:a", "job:b", "job:a")
	now := at(time.Second)
	equal(t, claimIDs(t, s, "one", now, 10), []string{ev[0], ev[2]}, "the first claim: the head of each key")
	equal(t, claimIDs(t, s, "two", now, 10), []string{}, "while they are leased, nothing")
	ds := deliveries(t, s, wh.ID)
	// a's first fails and is due again later: a's second still waits.
	noErr(t, finishDelivery(s, ctx, store.DeliveryOutcome{ID: ds[0].ID, Owner: "one", Now: now, Retry: at(time.Hour),
		Status: 503, Error: "503 Service Unavailable"}), "FinishWebhookDelivery retry")
	noErr(t, finishDelivery(s, ctx, store.DeliveryOutcome{ID: ds[2].ID, Owner: "one", Now: now, Delivered: true, Status: 204}),
		"FinishWebhookDelivery delivered")
	equal(t, claimIDs(t, s, "two", now, 10), []string{}, "a's next waits for a's first, b has no more")
	equal(t, claimIDs(t, s, "two", at(time.Hour), 10), []string{ev[0]}, "a's first once due again")
	ds = deliveries(t, s, wh.ID)
	equal(t, []any{ds[0].Attempts, ds[0].LastStatus, ds[0].LastError}, []any{1, 503, "503 Service Unavailable"}, "the retried delivery")
	equal(t, []any{ds[2].State, ds[2].Attempts, ds[2].EndedAt != nil}, []any{store.DeliveryDelivered, 1, true}, "the delivered one")
	// Given up: the next of the key goes ahead.
	noErr(t, finishDelivery(s, ctx, store.DeliveryOutcome{ID: ds[0].ID, Owner: "two", Now: at(time.Hour), GiveUp: true,
		Error: "gave up"}), "FinishWebhookDelivery give up")
	equal(t, claimIDs(t, s, "three", at(time.Hour), 10), []string{ev[1]}, "a's second after a's first was given up")
	noErr(t, finishDelivery(s, ctx, store.DeliveryOutcome{ID: ds[1].ID, Owner: "three", Now: at(time.Hour), Delivered: true}), "finish")
	equal(t, claimIDs(t, s, "three", at(time.Hour), 10), []string{ev[3]}, "a's third")
	counts, err := s.CountWebhookDeliveries(ctx, "")
	noErr(t, err, "CountWebhookDeliveries")
	equal(t, counts, map[string]int{store.DeliveryPending: 1, store.DeliveryFailed: 1}, "counts")
	counts, err = s.CountWebhookDeliveries(ctx, wh.ID)
	noErr(t, err, "CountWebhookDeliveries of one")
	equal(t, counts, map[string]int{store.DeliveryPending: 1, store.DeliveryFailed: 1}, "its counts")
	counts, err = s.CountWebhookDeliveries(ctx, "wh_none")
	noErr(t, err, "CountWebhookDeliveries of another")
	equal(t, counts, map[string]int{}, "another's counts")
}

func testDeliveryLease(t *testing.T, s store.Store) {
	ctx := t.Context()
	newWebhook(t, s, "all", []string{"*"})
	ev := emitKeyed(t, s, "job:a")
	ds, err := s.ClaimWebhookDeliveries(ctx, "one", t0, at(time.Minute), 10)
	noErr(t, err, "claim")
	equal(t, len(ds), 1, "claimed")
	equal(t, claimIDs(t, s, "two", at(30*time.Second), 10), []string{}, "within the lease")
	equal(t, claimIDs(t, s, "two", at(time.Minute), 10), []string{ev[0]}, "once the lease has passed")
	// One transaction, two outcomes: the stale claimer's changes nothing,
	// the lease holder's applies.
	errs, err := s.FinishWebhookDeliveries(ctx, []store.DeliveryOutcome{
		{ID: ds[0].ID, Owner: "one", Now: at(time.Minute), Delivered: true},
		{ID: ds[0].ID, Owner: "two", Now: at(time.Minute), Retry: at(time.Hour), Status: 500, Error: "HTTP 500"},
	})
	noErr(t, err, "FinishWebhookDeliveries")
	wantErr(t, errs[0], store.ErrConflict, "finishing under a lease that passed to another")
	noErr(t, errs[1], "the lease holder finishes")
	if d := deliveries(t, s, ds[0].WebhookID)[0]; d.State != store.DeliveryPending || d.LastStatus != 500 || d.Attempts != 1 {
		t.Fatalf("after the batch: %+v", d)
	}
	wantErr(t, finishDelivery(s, ctx, store.DeliveryOutcome{ID: ds[0].ID, Owner: "two", Now: at(time.Minute), Delivered: true}),
		store.ErrConflict, "finishing twice")
	equal(t, claimIDs(t, s, "three", at(time.Hour), 10), []string{ev[0]}, "due again at its retry")
}

// Claimers racing for the same deliveries never hold one at once, and
// together they claim each exactly once.
func testDeliveryConcurrentClaims(t *testing.T, s store.Store) {
	const claimers, keys, perKey = 6, 10, 3
	newWebhook(t, s, "all", []string{"*"})
	var all []string
	for k := range keys {
		for range perKey {
			all = append(all, emitKeyed(t, s, fmt.Sprintf("job:%d", k))...)
		}
	}
	var mu sync.Mutex
	held := map[string]string{}
	done := map[string]int{}
	errs := make(chan error, claimers)
	var wg sync.WaitGroup
	for c := range claimers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := fmt.Sprintf("claimer-%d", c)
			for idle := 0; idle < 50; {
				ds, err := s.ClaimWebhookDeliveries(context.Background(), owner, at(time.Second), at(time.Hour), 2)
				if err != nil {
					errs <- err
					return
				}
				if len(ds) == 0 {
					idle++
					time.Sleep(time.Millisecond)
					continue
				}
				for _, d := range ds {
					mu.Lock()
					if h, ok := held[d.Key]; ok {
						errs <- fmt.Errorf("%s claimed an event of %s while %s held one", owner, d.Key, h)
					}
					held[d.Key] = owner
					done[d.EventID]++
					mu.Unlock()
				}
				for _, d := range ds {
					mu.Lock()
					delete(held, d.Key)
					mu.Unlock()
					if err := finishDelivery(s, context.Background(), store.DeliveryOutcome{ID: d.ID, Owner: owner,
						Now: at(time.Second), Delivered: true}); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, id := range all {
		if done[id] != 1 {
			t.Fatalf("event %s claimed %d times, want once", id, done[id])
		}
	}
}

func testDeliveryLogAndPrune(t *testing.T, s store.Store) {
	ctx := t.Context()
	a := newWebhook(t, s, "a", []string{"*"})
	b := newWebhook(t, s, "b", []string{"job.queued"})
	emitKeyed(t, s, "job:1", "job:2", "job:3")
	equal(t, len(deliveries(t, s, a.ID)), 3, "a's deliveries")
	page, err := s.ListWebhookDeliveries(ctx, store.DeliveryFilter{WebhookID: b.ID, Limit: 2})
	noErr(t, err, "ListWebhookDeliveries")
	equal(t, len(page), 2, "a page")
	rest, err := s.ListWebhookDeliveries(ctx, store.DeliveryFilter{WebhookID: b.ID, BeforeID: page[1].ID})
	noErr(t, err, "ListWebhookDeliveries next page")
	equal(t, len(rest), 1, "the next page")
	ds, err := s.ClaimWebhookDeliveries(ctx, "one", at(time.Second), at(time.Minute), 10)
	noErr(t, err, "claim")
	for _, d := range ds {
		noErr(t, finishDelivery(s, ctx, store.DeliveryOutcome{ID: d.ID, Owner: "one", Now: at(time.Second), Delivered: true}), "finish")
	}
	pending, err := s.ListWebhookDeliveries(ctx, store.DeliveryFilter{State: store.DeliveryPending})
	noErr(t, err, "pending")
	equal(t, len(pending), 0, "pending after all were delivered")
	n, err := s.PruneWebhookDeliveries(ctx, at(time.Hour), 4)
	noErr(t, err, "PruneWebhookDeliveries")
	equal(t, n, 4, "pruned, at most the limit")
	n, err = s.PruneWebhookDeliveries(ctx, at(time.Hour), 100)
	noErr(t, err, "PruneWebhookDeliveries again")
	equal(t, n, 2, "pruned the rest")
	// Deleting a subscription deletes its deliveries.
	emitKeyed(t, s, "job:4")
	noErr(t, s.DeleteWebhook(ctx, a.ID, nil), "DeleteWebhook")
	left, err := s.ListWebhookDeliveries(ctx, store.DeliveryFilter{})
	noErr(t, err, "ListWebhookDeliveries")
	equal(t, len(left), 1, "deliveries left: b's")
}

// A kept checkpoint's event is written with its row.
func testOutboxWithACheckpoint(t *testing.T, s store.Store) {
	o := &recordingOutbox{}
	s.SetOutbox(o)
	wh := newWebhook(t, s, "all", []string{"checkpoint.saved"})
	w := newWorker(t, s)
	j := newJob(t, s)
	claim(t, s, w.ID)
	_, err := s.PutCheckpoint(t.Context(), store.Checkpoint{JobID: j.ID, Attempt: 1, Name: "checkpoint-10", Step: 10, Bytes: 3,
		Files: []protocol.CheckpointFile{{Path: "a", Size: 3, SHA256: strings.Repeat("0", 64)}}}, 2)
	noErr(t, err, "PutCheckpoint")
	ds := deliveries(t, s, wh.ID)
	equal(t, eventTypes(ds), []string{"checkpoint.saved"}, "events delivered")
	equal(t, ds[0].Key, "job:"+j.ID, "the event's key")
}
