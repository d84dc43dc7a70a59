package orchestrator

import (
	"context"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// Events for workers reach the instance that holds their stream: directly
// when it is this one, else through the store's notifications (PostgreSQL
// LISTEN/NOTIFY between replicas).

// sendToWorker delivers an event to a worker's stream, on this instance or,
// through the store's notifications, on the instance that holds it.
func (s *Server) sendToWorker(workerID, typ string, v any) {
	frame, err := s.hub.Frame(typ, v)
	if err != nil {
		return
	}
	if s.hub.SendFrame(workerID, frame) {
		return
	}
	s.publish(store.Notification{Kind: store.NotifyWorkerEvent, WorkerID: workerID, Payload: string(frame)})
}

// closeWorkerStream ends a worker's stream wherever it is open.
func (s *Server) closeWorkerStream(workerID, reason string) {
	s.hub.Close(workerID, reason)
	s.publish(store.Notification{Kind: store.NotifyWorkerClose, WorkerID: workerID, Payload: reason})
}

func (s *Server) publish(n store.Notification) {
	n.Origin = s.options().InstanceID
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.store.Publish(ctx, n); err != nil {
		s.log.Debug("publish failed", "kind", n.Kind, "err", err)
	}
}

// listen applies notifications from other instances.
func (s *Server) listen(ctx context.Context) {
	for {
		ch, err := s.store.Subscribe(ctx)
		if err != nil {
			s.log.Warn("cannot subscribe to notifications; relying on polling", "err", err)
		} else {
			for n := range ch {
				s.applyNotification(n)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Second):
		}
	}
}

func (s *Server) applyNotification(n store.Notification) {
	if n.Origin == s.options().InstanceID {
		return
	}
	switch n.Kind {
	case store.NotifyWake:
		s.Wake()
	case store.NotifyWorkerEvent:
		s.hub.SendFrame(n.WorkerID, []byte(n.Payload))
	case store.NotifyWorkerClose:
		s.hub.Close(n.WorkerID, n.Payload)
	case store.NotifyResync:
		// Lost notifications: a wake-up (the scheduler looks again), a
		// stream close after a token rotation (the token check finds it
		// now rather than at its next round). Events for workers are
		// repeated by heartbeat replies.
		s.log.Info("notifications may have been missed; checking again")
		s.Wake()
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			s.checkStreamTokens(ctx)
		}()
	}
}
