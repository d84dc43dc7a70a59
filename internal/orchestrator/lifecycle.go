package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// decideFunc looks at the job as it is now and returns the transition to try,
// or nil when there is nothing to do.
type decideFunc func(j store.Job) (*store.JobTransition, error)

// updateJob is the read-decide-write loop around the store's compare-and-set:
// when another writer moved the job first, it reads again and re-decides.
func (s *Server) updateJob(ctx context.Context, jobID string, decide decideFunc) (store.Job, bool, error) {
	for i := 0; ; i++ {
		j, err := s.store.GetJob(ctx, jobID)
		if err != nil {
			return j, false, err
		}
		t, err := decide(j)
		if err != nil || t == nil {
			return j, false, err
		}
		t.JobID, t.ExpectAttempt = j.ID, j.Attempt
		if len(t.FromStates) == 0 {
			t.FromStates = []protocol.JobStatus{j.Status}
		}
		if t.Now.IsZero() {
			t.Now = time.Now().UTC()
		}
		nj, err := s.store.TransitionJob(ctx, *t)
		if errors.Is(err, store.ErrConflict) && i < 5 {
			continue
		}
		if err != nil {
			return j, false, err
		}
		s.afterTransition(j, nj, t)
		return nj, true, nil
	}
}

// afterTransition does the in-memory follow-ups of a job change.
func (s *Server) afterTransition(before, after store.Job, t *store.JobTransition) {
	if after.Status == protocol.JobQueued && before.Status != protocol.JobQueued {
		s.metrics.Requeues.Add(1)
	}
	if t.EndAttempt != "" {
		// The worker is free (or the job is back in the queue): schedule again.
		s.Wake()
		s.publish(store.Notification{Kind: "wake"})
	}
}

func transitionAudit(actor, ip string, j store.Job, to protocol.JobStatus, details map[string]any) *audit.Record {
	if details == nil {
		details = map[string]any{}
	}
	details["from"], details["to"], details["attempt"] = j.Status, to, j.Attempt
	if j.WorkerID != "" {
		details["worker_id"] = j.WorkerID
	}
	rec := audit.New(actor, ip, "job.transition", "job", j.ID, audit.Success, details)
	return &rec
}

// loseAttempt ends a job's current attempt because its worker is gone: an
// unacknowledged dispatch is withdrawn (no retry spent), a canceling job ends
// cancelled, anything else is requeued while retries remain, else failed.
func (s *Server) loseAttempt(ctx context.Context, jobID, workerID, why string) error {
	_, _, err := s.updateJob(ctx, jobID, func(j store.Job) (*store.JobTransition, error) {
		if j.Status.Terminal() || j.Status == protocol.JobQueued || (workerID != "" && j.WorkerID != workerID) {
			return nil, nil
		}
		t := lossTransition(j, why)
		t.Audit = transitionAudit("system", "", j, t.To, map[string]any{"outcome": t.EndAttempt, "reason": why})
		return t, nil
	})
	return err
}

// lossTransition ends j's current attempt because its worker let go of it.
func lossTransition(j store.Job, why string) *store.JobTransition {
	t := &store.JobTransition{ExpectWorker: j.WorkerID}
	switch {
	case j.Status == protocol.JobCanceling:
		t.To, t.EndAttempt = protocol.JobCancelled, protocol.OutcomeCancelled
		t.Error = ptr("cancelled; the worker was lost before confirming: " + why)
	case j.Status == protocol.JobDispatched:
		t.To, t.EndAttempt = protocol.JobQueued, protocol.OutcomeWithdrawn
		t.Error = ptr(fmt.Sprintf("attempt %d withdrawn before it started: %s", j.Attempt, why))
	case j.RetriesUsed < j.MaxRetries:
		t.To, t.EndAttempt, t.SpendRetry = protocol.JobQueued, protocol.OutcomeWorkerLost, true
		t.Error = ptr(fmt.Sprintf("attempt %d lost: %s; requeued (retry %d of %d)", j.Attempt, why, j.RetriesUsed+1, j.MaxRetries))
	default:
		t.To, t.EndAttempt = protocol.JobFailed, protocol.OutcomeWorkerLost
		t.Error = ptr(fmt.Sprintf("attempt %d lost: %s; no retries remain (%d used)", j.Attempt, why, j.RetriesUsed))
	}
	return t
}

func ptr[T any](v T) *T { return &v }

// requestCancel moves an active job to canceling and tells its worker.
func (s *Server) requestCancel(ctx context.Context, j store.Job, actor, ip string) (store.Job, error) {
	opt := s.options()
	deadline := time.Now().UTC().Add(opt.CancelGrace + opt.CancelReportTimeout)
	nj, _, err := s.updateJob(ctx, j.ID, func(cur store.Job) (*store.JobTransition, error) {
		switch {
		case cur.Status.Terminal():
			return nil, conflict("job %s is already %s", cur.ID, cur.Status)
		case cur.Status == protocol.JobQueued:
			return &store.JobTransition{To: protocol.JobCancelled, Error: ptr("cancelled before it started"),
				Audit: transitionAudit(actor, ip, cur, protocol.JobCancelled, nil)}, nil
		case cur.Status == protocol.JobCanceling:
			return nil, nil
		}
		return &store.JobTransition{To: protocol.JobCanceling, CancelDeadline: &deadline,
			Audit: transitionAudit(actor, ip, cur, protocol.JobCanceling, nil)}, nil
	})
	if err != nil {
		return nj, err
	}
	if nj.Status == protocol.JobCanceling {
		s.sendToWorker(nj.WorkerID, protocol.EventJobCancel, protocol.JobCancelEvent{
			Type: protocol.EventJobCancel, JobID: nj.ID, Attempt: nj.Attempt, GraceSeconds: opt.CancelGrace.Seconds()})
	}
	return nj, nil
}

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
	s.publish(store.Notification{Kind: "worker_event", WorkerID: workerID, Payload: string(frame)})
}

// closeWorkerStream ends a worker's stream wherever it is open.
func (s *Server) closeWorkerStream(workerID, reason string) {
	s.hub.Close(workerID, reason)
	s.publish(store.Notification{Kind: "worker_close", WorkerID: workerID, Payload: reason})
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
	case "wake":
		s.Wake()
	case "worker_event":
		s.hub.SendFrame(n.WorkerID, []byte(n.Payload))
	case "worker_close":
		s.hub.Close(n.WorkerID, n.Payload)
	}
}
