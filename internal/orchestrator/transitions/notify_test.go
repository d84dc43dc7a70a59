package transitions

import (
	"io"
	"log/slog"
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/hub"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// What another replica publishes reaches this one's streams and scheduler;
// what this replica published itself is not applied twice.
func TestNotificationsFromOtherReplicasApply(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := hub.New(log)
	wakes := 0
	n := &Notifier{Hub: h, Log: log, Wake: func() { wakes++ }, InstanceID: func() string { return "here" }}
	st := h.Attach("w1", "hash")

	n.apply(store.Notification{Kind: store.NotifyWake, Origin: "here"})
	n.apply(store.Notification{Kind: store.NotifyWorkerClose, Origin: "here", WorkerID: "w1", Payload: "own"})
	if wakes != 0 || !h.Connected("w1") {
		t.Fatalf("own notifications applied: %d wake-ups, connected %v", wakes, h.Connected("w1"))
	}

	n.apply(store.Notification{Kind: store.NotifyWake, Origin: "there"})
	if wakes != 1 {
		t.Fatalf("a wake-up from another replica: %d wake-ups", wakes)
	}
	frame := []byte("event: drain\ndata: {}\n\n")
	n.apply(store.Notification{Kind: store.NotifyWorkerEvent, Origin: "there", WorkerID: "w1", Payload: string(frame)})
	select {
	case out := <-st.Events():
		if string(out.Frame) != string(frame) {
			t.Fatalf("frame %q, want %q", out.Frame, frame)
		}
	default:
		t.Fatal("an event for a stream held here was not queued on it")
	}
	n.apply(store.Notification{Kind: store.NotifyWorkerClose, Origin: "there", WorkerID: "w1", Payload: "token rotated"})
	select {
	case <-st.Done():
		if st.Reason() != "token rotated" {
			t.Fatalf("closed for %q", st.Reason())
		}
	default:
		t.Fatal("a close from another replica left the stream open")
	}
}
