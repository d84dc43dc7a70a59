package orchestrator

import (
	"context"
	"errors"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/lifecycle"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/web"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// This file applies the lifecycle's decisions to jobs. Every change of a
// job's state goes through moveJob: read the job, ask the lifecycle what to
// do, and write with the store's compare-and-set (which checks the move
// against the lifecycle table again). Nothing else changes a job's state.

// decideFunc looks at the job as it is now and returns the transition to try,
// or nil when there is nothing to do.
type decideFunc func(j store.Job) (*store.JobTransition, error)

// moveJob is the read-decide-write loop around the store's compare-and-set:
// when another writer moved the job first, it reads again and re-decides.
func (s *Server) moveJob(ctx context.Context, jobID string, decide decideFunc) (store.Job, bool, error) {
	for i := 0; ; i++ {
		j, err := s.store.GetJob(ctx, jobID)
		if err != nil {
			return j, false, err
		}
		t, err := decide(j)
		if err != nil || t == nil {
			return j, false, err
		}
		t.JobID, t.ExpectAttempt, t.From = j.ID, j.Attempt, j.Status
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
		s.afterMove(j, nj, t)
		return nj, true, nil
	}
}

// afterMove does the in-memory follow-ups of a job change.
func (s *Server) afterMove(before, after store.Job, t *store.JobTransition) {
	s.logFeed.Moved(after.ID)
	if after.Status == protocol.JobQueued && before.Status != protocol.JobQueued {
		s.metrics.Requeues.Add(1)
	}
	if t.EndAttempt != "" {
		// The worker is free (or the job is back in the queue): schedule again.
		s.Wake()
		s.publish(store.Notification{Kind: store.NotifyWake})
	}
}

// step turns a lifecycle step into a transition audited as done by actor.
func step(st lifecycle.Step, j store.Job, actor, ip string, details map[string]any) *store.JobTransition {
	if details == nil {
		details = map[string]any{}
	}
	details["from"], details["to"], details["attempt"], details["cause"] = j.Status, st.To, j.Attempt, st.By
	if j.WorkerID != "" {
		details["worker_id"] = j.WorkerID
	}
	if st.EndAttempt != "" {
		details["outcome"] = st.EndAttempt
	}
	if st.SpendRetry {
		details["retry_spent"] = true
	}
	rec := audit.New(actor, ip, "job.transition", "job", j.ID, audit.Success, details)
	return &store.JobTransition{Step: st, Audit: &rec}
}

// applyReport applies a worker's report on its attempt of a job. It returns
// the job as it is now and whether the report ended the attempt. A report
// that is not for the job's current attempt held by this worker is stale.
func (s *Server) applyReport(ctx context.Context, wk store.Worker, jobID string, attempt int, rep protocol.StatusReport, ip string) (store.Job, bool, error) {
	errMsg := ""
	if rep.Error != nil {
		errMsg = *rep.Error
	}
	endedAttempt := false
	nj, changed, err := s.moveJob(ctx, jobID, func(cur store.Job) (*store.JobTransition, error) {
		if attempt == 0 {
			attempt = cur.Attempt // protocol 1 does not say
		}
		if cur.WorkerID != wk.ID || attempt != cur.Attempt {
			return nil, s.stale(wk, cur, attempt, rep.Status)
		}
		if cur.Status.Terminal() {
			if string(cur.Status) == rep.Status {
				return nil, nil // the same terminal report again
			}
			return nil, s.stale(wk, cur, attempt, rep.Status)
		}
		st, ok := lifecycle.OnReport(cur.Facts(), rep.Status, errMsg, len(rep.Progress) > 0)
		if rep.Fault != nil && rep.Status == protocol.ReportFailed {
			st, ok = lifecycle.OnGPUFault(cur.Facts(), errMsg)
		}
		if rep.Shutdown && rep.Status == protocol.ReportCancelled {
			st, ok = lifecycle.OnWorkerStop(cur.Facts(), errMsg)
		}
		if !ok {
			return nil, nil
		}
		t := step(st, cur, workerActor(wk), ip, map[string]any{"report": rep.Status})
		t.ExpectWorker, t.Progress = wk.ID, rep.Progress
		endedAttempt = st.EndAttempt != ""
		if endedAttempt {
			t.Usage = rep.Usage
		}
		return t, nil
	})
	if changed && endedAttempt {
		s.metrics.CountGPUSeconds(wk, nj, rep.Usage)
	}
	ended := changed && nj.Status.Terminal()
	if ended {
		s.log.Info("job finished", "job_id", nj.ID, "attempt", nj.Attempt, "status", nj.Status, "worker_id", wk.ID)
		s.afterWorkerFreed(ctx, wk.ID)
	}
	return nj, ended, err
}

// stale counts and logs a report for an attempt that is not the job's
// current one on this worker, and returns the 409 that tells it to stop.
func (s *Server) stale(wk store.Worker, j store.Job, attempt int, status string) error {
	s.metrics.StaleRejections.Add(1)
	s.log.Info("stale report refused", "job_id", j.ID, "worker_id", wk.ID, "attempt", attempt,
		"current_attempt", j.Attempt, "current_worker", j.WorkerID, "report", status)
	return web.StaleAttempt("attempt %d of job %s is not the current attempt held by worker %s (job is %s, attempt %d); stop it",
		attempt, j.ID, wk.ID, j.Status, j.Attempt)
}

// loseAttempt ends a job's current attempt because its worker is gone (see
// lifecycle.OnLoss). With workerID set, only an attempt of that worker.
func (s *Server) loseAttempt(ctx context.Context, jobID, workerID, why string) error {
	return s.endOnWorker(ctx, jobID, workerID, why, "system", "", lifecycle.OnLoss)
}

// evictAttempt ends a job's current attempt because an admin deleted its
// worker (see lifecycle.OnEviction).
func (s *Server) evictAttempt(ctx context.Context, jobID, workerID, why, actor, ip string) error {
	return s.endOnWorker(ctx, jobID, workerID, why, actor, ip, lifecycle.OnEviction)
}

func (s *Server) endOnWorker(ctx context.Context, jobID, workerID, why, actor, ip string, decide func(lifecycle.Job, string) (lifecycle.Step, bool)) error {
	_, _, err := s.moveJob(ctx, jobID, func(j store.Job) (*store.JobTransition, error) {
		if workerID != "" && j.WorkerID != workerID {
			return nil, nil
		}
		st, ok := decide(j.Facts(), why)
		if !ok {
			return nil, nil
		}
		t := step(st, j, actor, ip, map[string]any{"reason": why})
		t.ExpectWorker = j.WorkerID
		return t, nil
	})
	return err
}

// loseAll ends every attempt the store has out on a worker.
func (s *Server) loseAll(ctx context.Context, workerID, why string) error {
	active, err := s.activeOn(ctx, workerID)
	if err != nil {
		return err
	}
	for _, j := range active {
		if err := s.loseAttempt(ctx, j.ID, workerID, why); err != nil {
			return err
		}
	}
	return nil
}

// activeOn lists the jobs whose current attempt is out on a worker.
func (s *Server) activeOn(ctx context.Context, workerID string) ([]store.Job, error) {
	jobs, _, err := s.store.ListJobs(ctx, store.JobFilter{WorkerID: workerID, Statuses: protocol.ActiveJobStatuses()})
	return jobs, err
}

// requestCancel answers a user's cancel: a queued job ends at once, an active
// one moves to canceling and its worker is told.
// The worker has its grace plus cancel_report_timeout to confirm.
func (s *Server) requestCancel(ctx context.Context, jobID, actor, ip string) (store.Job, error) {
	opt := s.options()
	nj, _, err := s.moveJob(ctx, jobID, func(cur store.Job) (*store.JobTransition, error) {
		st, ok, err := lifecycle.OnCancel(cur.Facts())
		if errors.Is(err, lifecycle.ErrFinished) {
			return nil, web.Conflict("job %s is already %s", cur.ID, cur.Status)
		}
		if err != nil || !ok {
			return nil, err
		}
		t := step(st, cur, actor, ip, nil)
		if cur.PreemptedBy != "" { // a cancel wins over the preemption under way: no requeue
			t.PreemptedBy = new(string)
		}
		if st.To == protocol.JobCanceling {
			deadline := time.Now().UTC().Add(s.cancelGrace(ctx, cur.WorkerID) + opt.CancelReportTimeout)
			t.CancelDeadline = &deadline
		}
		return t, nil
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

// expireDeadlines withdraws dispatches nobody acknowledged, finishes cancels
// nobody confirmed and fails jobs past their timeout. All go through the same
// compare-and-set as worker reports, so a late report and a deadline can
// never both win.
func (s *Server) expireDeadlines(ctx context.Context) {
	jobs, _, err := s.store.ListJobs(ctx, store.JobFilter{Statuses: protocol.ActiveJobStatuses()})
	s.noteStore(err)
	if err != nil {
		return
	}
	now := time.Now().UTC()
	for _, j := range jobs {
		if _, due := lifecycle.OnDeadline(j.Facts(), now); due {
			s.expire(ctx, j, now)
		}
	}
}

func (s *Server) expire(ctx context.Context, j store.Job, now time.Time) {
	from, attempt := j.Status, j.Attempt
	nj, changed, err := s.moveJob(ctx, j.ID, func(cur store.Job) (*store.JobTransition, error) {
		if cur.Status != from || cur.Attempt != attempt {
			return nil, nil
		}
		st, ok := lifecycle.OnDeadline(cur.Facts(), now)
		if !ok {
			return nil, nil
		}
		return step(st, cur, "system", "", map[string]any{"reason": *st.Error}), nil
	})
	if err != nil {
		if !s.logDiskFullOnce(err) {
			s.log.Warn("deadline update failed", "job_id", j.ID, "err", err)
		}
		return
	}
	if !changed {
		return
	}
	s.log.Info("job deadline passed", "job_id", j.ID, "attempt", attempt, "now", nj.Status, "reason", nj.Error)
	cancel := protocol.JobCancelEvent{Type: protocol.EventJobCancel, JobID: j.ID, Attempt: attempt}
	switch {
	case from == protocol.JobRunning: // timed out: stop the trainer
		s.sendToWorker(j.WorkerID, protocol.EventJobCancel, cancel)
	case nj.Status == protocol.JobQueued && from == protocol.JobCanceling: // preempted, stop not confirmed
		// The attempt is fenced; closing the stream makes the worker
		// re-register and give it up if it still runs it.
		s.sendToWorker(j.WorkerID, protocol.EventJobCancel, cancel)
		s.closeWorkerStream(j.WorkerID, "a preempted attempt was not confirmed stopped")
	case nj.Status == protocol.JobQueued: // withdrawn
		// A stream that swallowed a job_submit is not to be trusted with the
		// next one: close it so the worker re-registers and reconciles.
		s.sendToWorker(j.WorkerID, protocol.EventJobCancel, cancel)
		s.closeWorkerStream(j.WorkerID, "dispatch not acknowledged")
	}
}
