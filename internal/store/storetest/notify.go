package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

var notifyTests = []test{
	{"PublishSubscribe", testPublishSubscribe},
}

// receive waits for a notification of the given kind, skipping others (a
// backend may send "resync" on its own, e.g. after reconnecting).
func receive(t *testing.T, ch <-chan store.Notification, kind string) store.Notification {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case n, ok := <-ch:
			if !ok {
				t.Fatalf("subscription closed while waiting for %q", kind)
			}
			if n.Kind == kind {
				return n
			}
		case <-timeout:
			t.Fatalf("no %q notification within 10s", kind)
		}
	}
}

func testPublishSubscribe(t *testing.T, s store.Store) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	a, err := s.Subscribe(ctx)
	noErr(t, err, "Subscribe")
	b, err := s.Subscribe(ctx)
	noErr(t, err, "Subscribe")
	n := store.Notification{Kind: store.NotifyWorkerEvent, WorkerID: "w_1", Payload: "event: ping\ndata: {}\n\n", Origin: "inst-a"}
	noErr(t, s.Publish(t.Context(), n), "Publish")
	equal(t, receive(t, a, store.NotifyWorkerEvent), n, "first subscriber")
	equal(t, receive(t, b, store.NotifyWorkerEvent), n, "second subscriber")

	cancel()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-a:
			if !ok {
				return
			}
		case <-timeout:
			t.Fatal("the channel must close when the context ends")
		}
	}
}
