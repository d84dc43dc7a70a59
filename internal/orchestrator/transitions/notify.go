package transitions

import (
	"context"
	"log/slog"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/hub"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// Events for workers reach the instance that holds their stream: directly
// when it is this one, else through the store's notifications (PostgreSQL
// LISTEN/NOTIFY between replicas).

// Bus is what the notifications use of the store.
type Bus interface {
	Publish(ctx context.Context, n store.Notification) error
	Subscribe(ctx context.Context) (<-chan store.Notification, error)
}

// Notifier delivers events to workers' streams and wake-ups to schedulers,
// on this instance and, through the store, on the others.
type Notifier struct {
	Hub *hub.Hub
	Bus Bus
	Log *slog.Logger
	// InstanceID names this instance in what it publishes (it ignores its own).
	InstanceID func() string
	// Wake asks this instance's scheduler for a pass.
	Wake func()
	// Resync runs when notifications may have been lost: the streams'
	// tokens are checked again.
	Resync func(ctx context.Context)
}

// SendToWorker delivers an event to a worker's stream, on this instance or,
// through the store's notifications, on the instance that holds it.
func (n *Notifier) SendToWorker(workerID, typ string, v any) {
	frame, err := n.Hub.Frame(typ, v)
	if err != nil {
		return
	}
	if n.Hub.SendFrame(workerID, frame) {
		return
	}
	n.Publish(store.Notification{Kind: store.NotifyWorkerEvent, WorkerID: workerID, Payload: string(frame)})
}

// CloseWorkerStream ends a worker's stream wherever it is open.
func (n *Notifier) CloseWorkerStream(workerID, reason string) {
	n.Hub.Close(workerID, reason)
	n.Publish(store.Notification{Kind: store.NotifyWorkerClose, WorkerID: workerID, Payload: reason})
}

// WakeSchedulers asks every instance's scheduler for a pass.
func (n *Notifier) WakeSchedulers() {
	n.Wake()
	n.Publish(store.Notification{Kind: store.NotifyWake})
}

// Publish sends a notification to the other instances.
func (n *Notifier) Publish(note store.Notification) {
	note.Origin = n.InstanceID()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := n.Bus.Publish(ctx, note); err != nil {
		n.Log.Debug("publish failed", "kind", note.Kind, "err", err)
	}
}

// Listen applies notifications from other instances until ctx ends.
func (n *Notifier) Listen(ctx context.Context) {
	for {
		ch, err := n.Bus.Subscribe(ctx)
		if err != nil {
			n.Log.Warn("cannot subscribe to notifications; relying on polling", "err", err)
		} else {
			for note := range ch {
				n.apply(note)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Second):
		}
	}
}

func (n *Notifier) apply(note store.Notification) {
	if note.Origin == n.InstanceID() {
		return
	}
	switch note.Kind {
	case store.NotifyWake:
		n.Wake()
	case store.NotifyWorkerEvent:
		n.Hub.SendFrame(note.WorkerID, []byte(note.Payload))
	case store.NotifyWorkerClose:
		n.Hub.Close(note.WorkerID, note.Payload)
	case store.NotifyResync:
		// Lost notifications: a wake-up (the scheduler looks again), a
		// stream close after a token rotation (the token check finds it
		// now rather than at its next round). Events for workers are
		// repeated by heartbeat replies.
		n.Log.Info("notifications may have been missed; checking again")
		n.Wake()
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			n.Resync(ctx)
		}()
	}
}
