package storetest

import (
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

var subscriptionTests = []test{
	{"OutboxSubscriptionComesAndGoes", testOutboxSubscriptionComesAndGoes},
}

// A store may skip the outbox while no subscription exists (one writer):
// the change after a subscription is made still has its event, and the
// change after the last one is deleted has none for a new one.
func testOutboxSubscriptionComesAndGoes(t *testing.T, s store.Store) {
	ctx := t.Context()
	o := &recordingOutbox{}
	s.SetOutbox(o)
	newJob(t, s) // nobody listens yet
	first := newWebhook(t, s, "first", []string{"*"})
	j := newJob(t, s)
	ds := deliveries(t, s, first.ID)
	equal(t, eventTypes(ds), []string{"job.queued"}, "events after the subscription was made")
	equal(t, ds[0].Key, "job:"+j.ID, "the event's job")

	noErr(t, s.DeleteWebhook(ctx, first.ID, nil), "DeleteWebhook")
	newJob(t, s) // nobody listens again
	second := newWebhook(t, s, "second", []string{"*"})
	equal(t, len(deliveries(t, s, second.ID)), 0, "deliveries of a change made before the subscription")
	newJob(t, s)
	equal(t, eventTypes(deliveries(t, s, second.ID)), []string{"job.queued"}, "events after the second subscription")

	// Made by the configuration, in a sync, just the same.
	noErr(t, s.DeleteWebhook(ctx, second.ID, nil), "DeleteWebhook")
	newJob(t, s)
	cfg := store.Webhook{ID: "wh_cfg", Name: "cfg", URL: "https://example.test/cfg", Events: []string{"job.*"}, Format: "json",
		Secret: "s3cret-cfg", CreatedAt: t0}
	noErr(t, s.SyncConfigWebhooks(ctx, []store.Webhook{cfg}, func(string, store.Webhook) *audit.Record { return nil }), "SyncConfigWebhooks")
	newJob(t, s)
	equal(t, eventTypes(deliveries(t, s, cfg.ID)), []string{"job.queued"}, "events after a subscription from the configuration")
}
