// Package transitions applies the lifecycle's decisions to jobs, and tells
// workers and schedulers what followed. Every change of a job's state
// outside a claim goes through a Mover: read the job, ask the lifecycle
// what to do, and write with the store's compare-and-set (which checks the
// move against the lifecycle table again). The worker protocol, the
// scheduler and the admin API call it; it calls none of them.
package transitions

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/lifecycle"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/logfeed"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/metrics"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/web"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// Store is what the job moves read and write.
type Store interface {
	GetJob(ctx context.Context, id string) (store.Job, error)
	ListJobs(ctx context.Context, f store.JobFilter) (jobs []store.Job, total int, err error)
	TransitionJob(ctx context.Context, t store.JobTransition) (store.Job, error)
	GetWorker(ctx context.Context, id string) (store.Worker, error)
	GetWorkerState(ctx context.Context, id string) (store.WorkerState, error)
}

// Options are the settings the moves read.
type Options struct {
	// CancelGrace is the SIGTERM → SIGKILL grace of a cancelled job (a
	// worker's own, when its admin set one, wins); CancelReportTimeout is
	// how long after it the worker has to confirm.
	CancelGrace         time.Duration
	CancelReportTimeout time.Duration
}

// Mover carries out job moves.
type Mover struct {
	Store   Store
	Notify  *Notifier
	Log     *slog.Logger
	Metrics *metrics.Metrics
	LogFeed *logfeed.Feed
	Options func() Options
	// DiskFull enters the full-disk state for a background write's error
	// and reports whether err was one.
	DiskFull func(err error) bool
	// NoteStore tells the watchdog whether the store answered.
	NoteStore func(err error)
}

// WorkerActor is how the audit names a worker acting with its token.
func WorkerActor(wk store.Worker) string { return "worker:" + wk.ID }

// decideFunc looks at the job as it is now and returns the transition to try,
// or nil when there is nothing to do.
type decideFunc func(j store.Job) (*store.JobTransition, error)

// moveJob is the read-decide-write loop around the store's compare-and-set:
// when another writer moved the job first, it reads again and re-decides.
func (m *Mover) moveJob(ctx context.Context, jobID string, decide decideFunc) (store.Job, bool, error) {
	for i := 0; ; i++ {
		j, err := m.Store.GetJob(ctx, jobID)
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
		nj, err := m.Store.TransitionJob(ctx, *t)
		if errors.Is(err, store.ErrConflict) && i < 5 {
			continue
		}
		if err != nil {
			return j, false, err
		}
		m.afterMove(j, nj, t)
		return nj, true, nil
	}
}

// afterMove does the in-memory follow-ups of a job change.
func (m *Mover) afterMove(before, after store.Job, t *store.JobTransition) {
	m.LogFeed.Moved(after.ID)
	if after.Status == protocol.JobQueued && before.Status != protocol.JobQueued && before.Status != protocol.JobPendingApproval {
		m.Metrics.Requeues.Add(1)
	}
	if t.EndAttempt != "" || after.Status.Terminal() {
		// The worker is free, the job is back in the queue, or its end
		// released the jobs that waited on it: schedule again.
		m.Notify.WakeSchedulers()
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

// ApplyReport applies a worker's report on its attempt of a job. It returns
// the job as it is now and whether the report ended the job. A report that
// is not for the job's current attempt held by this worker is stale.
func (m *Mover) ApplyReport(ctx context.Context, wk store.Worker, jobID string, attempt int, rep protocol.StatusReport, ip string) (store.Job, bool, error) {
	errMsg := ""
	if rep.Error != nil {
		errMsg = *rep.Error
	}
	endedAttempt := false
	nj, changed, err := m.moveJob(ctx, jobID, func(cur store.Job) (*store.JobTransition, error) {
		if attempt == 0 {
			attempt = cur.Attempt // protocol 1 does not say
		}
		if cur.WorkerID != wk.ID || attempt != cur.Attempt {
			return nil, m.Stale(wk, cur, attempt, rep.Status)
		}
		if cur.Status.Terminal() {
			if string(cur.Status) == rep.Status {
				return nil, nil // the same terminal report again
			}
			return nil, m.Stale(wk, cur, attempt, rep.Status)
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
		t := step(st, cur, WorkerActor(wk), ip, map[string]any{"report": rep.Status})
		t.ExpectWorker, t.Progress = wk.ID, rep.Progress
		endedAttempt = st.EndAttempt != ""
		if endedAttempt {
			t.Usage = rep.Usage
		}
		return t, nil
	})
	if changed && endedAttempt {
		m.Metrics.CountGPUSeconds(wk, nj, rep.Usage)
	}
	ended := changed && nj.Status.Terminal()
	if ended {
		m.Log.Info("job finished", "job_id", nj.ID, "attempt", nj.Attempt, "status", nj.Status, "worker_id", wk.ID)
		m.afterWorkerFreed(ctx, wk.ID)
	}
	return nj, ended, err
}

// Stale counts and logs a report for an attempt that is not the job's
// current one on this worker, and returns the 409 that tells it to stop.
func (m *Mover) Stale(wk store.Worker, j store.Job, attempt int, status string) error {
	m.Metrics.StaleRejections.Add(1)
	m.Log.Info("stale report refused", "job_id", j.ID, "worker_id", wk.ID, "attempt", attempt,
		"current_attempt", j.Attempt, "current_worker", j.WorkerID, "report", status)
	return web.StaleAttempt("attempt %d of job %s is not the current attempt held by worker %s (job is %s, attempt %d); stop it",
		attempt, j.ID, wk.ID, j.Status, j.Attempt)
}

// afterWorkerFreed runs when a worker's job ended: a draining ephemeral worker
// is told to shut down; anyone else may get the next job.
func (m *Mover) afterWorkerFreed(ctx context.Context, workerID string) {
	wk, err := m.Store.GetWorkerState(ctx, workerID)
	if err != nil {
		return
	}
	if wk.Status == protocol.WorkerDraining && wk.Type == protocol.Ephemeral && wk.CurrentJobID == "" {
		m.Notify.SendToWorker(workerID, protocol.EventShutdown, protocol.NewShutdownEvent("drained"))
	}
	m.Notify.Wake()
}

// LoseAttempt ends a job's current attempt because its worker is gone (see
// lifecycle.OnLoss). With workerID set, only an attempt of that worker.
func (m *Mover) LoseAttempt(ctx context.Context, jobID, workerID, why string) error {
	return m.endOnWorker(ctx, jobID, workerID, why, "system", "", lifecycle.OnLoss)
}

// EvictAttempt ends a job's current attempt because an admin deleted its
// worker (see lifecycle.OnEviction).
func (m *Mover) EvictAttempt(ctx context.Context, jobID, workerID, why, actor, ip string) error {
	return m.endOnWorker(ctx, jobID, workerID, why, actor, ip, lifecycle.OnEviction)
}

func (m *Mover) endOnWorker(ctx context.Context, jobID, workerID, why, actor, ip string, decide func(lifecycle.Job, string) (lifecycle.Step, bool)) error {
	_, _, err := m.moveJob(ctx, jobID, func(j store.Job) (*store.JobTransition, error) {
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

// LoseAll ends every attempt the store has out on a worker.
func (m *Mover) LoseAll(ctx context.Context, workerID, why string) error {
	active, err := m.ActiveOn(ctx, workerID)
	if err != nil {
		return err
	}
	for _, j := range active {
		if err := m.LoseAttempt(ctx, j.ID, workerID, why); err != nil {
			return err
		}
	}
	return nil
}

// ActiveOn lists the jobs whose current attempt is out on a worker.
func (m *Mover) ActiveOn(ctx context.Context, workerID string) ([]store.Job, error) {
	jobs, _, err := m.Store.ListJobs(ctx, store.JobFilter{WorkerID: workerID, Statuses: protocol.ActiveJobStatuses()})
	return jobs, err
}

// cancelGrace is the SIGTERM → SIGKILL grace a worker gives a cancelled job:
// its own when its admin set one, else the orchestrator's.
func (m *Mover) cancelGrace(ctx context.Context, workerID string) time.Duration {
	grace := m.Options().CancelGrace
	if wk, err := m.Store.GetWorker(ctx, workerID); err == nil && wk.Capabilities.CancelGraceSeconds > 0 {
		grace = time.Duration(wk.Capabilities.CancelGraceSeconds * float64(time.Second))
	}
	return grace
}

// RequestCancel answers a user's cancel: a queued job ends at once, an active
// one moves to canceling and its worker is told.
// The worker has its grace plus cancel_report_timeout to confirm.
func (m *Mover) RequestCancel(ctx context.Context, jobID, actor, ip string) (store.Job, error) {
	opt := m.Options()
	nj, _, err := m.moveJob(ctx, jobID, func(cur store.Job) (*store.JobTransition, error) {
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
			deadline := time.Now().UTC().Add(m.cancelGrace(ctx, cur.WorkerID) + opt.CancelReportTimeout)
			t.CancelDeadline = &deadline
		}
		return t, nil
	})
	if err != nil {
		return nj, err
	}
	if nj.Status == protocol.JobCanceling {
		m.Notify.SendToWorker(nj.WorkerID, protocol.EventJobCancel, protocol.JobCancelEvent{
			Type: protocol.EventJobCancel, JobID: nj.ID, Attempt: nj.Attempt, GraceSeconds: opt.CancelGrace.Seconds()})
	}
	return nj, nil
}

// Preempt stops a running attempt for job forJob: the job moves to
// canceling with the reason, its worker is told to stop it as for a
// cancel, and when the attempt ends the job is requeued without spending a
// retry (lifecycle.OnPreempt).
func (m *Mover) Preempt(ctx context.Context, v store.ActiveAttempt, forJob, why string) {
	opt := m.Options()
	by := forJob + " (" + why + ")"
	nj, changed, err := m.moveJob(ctx, v.JobID, func(cur store.Job) (*store.JobTransition, error) {
		if cur.WorkerID != v.WorkerID || cur.PreemptedBy != "" {
			return nil, nil
		}
		st, ok := lifecycle.OnPreempt(cur.Facts())
		if !ok {
			return nil, nil
		}
		t := step(st, cur, "system", "", map[string]any{"preempted_for": forJob, "reason": why})
		t.ExpectWorker, t.PreemptedBy = cur.WorkerID, &by
		deadline := time.Now().UTC().Add(m.cancelGrace(ctx, cur.WorkerID) + opt.CancelReportTimeout)
		t.CancelDeadline = &deadline
		return t, nil
	})
	if err != nil {
		if !m.DiskFull(err) {
			m.Log.Warn("preemption failed", "job_id", v.JobID, "for_job", forJob, "err", err)
		}
		return
	}
	if !changed {
		return
	}
	m.Metrics.Preemptions.Add(1)
	m.Log.Info("job preempted", "job_id", nj.ID, "attempt", nj.Attempt, "worker_id", nj.WorkerID, "team", nj.Team,
		"for_job", forJob, "reason", why)
	m.Notify.SendToWorker(nj.WorkerID, protocol.EventJobCancel, protocol.JobCancelEvent{
		Type: protocol.EventJobCancel, JobID: nj.ID, Attempt: nj.Attempt, GraceSeconds: opt.CancelGrace.Seconds()})
}

// ExpireDeadlines withdraws dispatches nobody acknowledged, finishes cancels
// nobody confirmed and fails jobs past their timeout. All go through the same
// compare-and-set as worker reports, so a late report and a deadline can
// never both win.
func (m *Mover) ExpireDeadlines(ctx context.Context) {
	jobs, _, err := m.Store.ListJobs(ctx, store.JobFilter{Statuses: protocol.ActiveJobStatuses()})
	m.NoteStore(err)
	if err != nil {
		return
	}
	now := time.Now().UTC()
	for _, j := range jobs {
		if _, due := lifecycle.OnDeadline(j.Facts(), now); due {
			m.expire(ctx, j, now)
		}
	}
}

func (m *Mover) expire(ctx context.Context, j store.Job, now time.Time) {
	from, attempt := j.Status, j.Attempt
	nj, changed, err := m.moveJob(ctx, j.ID, func(cur store.Job) (*store.JobTransition, error) {
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
		if !m.DiskFull(err) {
			m.Log.Warn("deadline update failed", "job_id", j.ID, "err", err)
		}
		return
	}
	if !changed {
		return
	}
	m.Log.Info("job deadline passed", "job_id", j.ID, "attempt", attempt, "now", nj.Status, "reason", nj.Error)
	cancel := protocol.JobCancelEvent{Type: protocol.EventJobCancel, JobID: j.ID, Attempt: attempt}
	switch {
	case from == protocol.JobRunning: // timed out: stop the trainer
		m.Notify.SendToWorker(j.WorkerID, protocol.EventJobCancel, cancel)
	case nj.Status == protocol.JobQueued && from == protocol.JobCanceling: // preempted, stop not confirmed
		// The attempt is fenced; closing the stream makes the worker
		// re-register and give it up if it still runs it.
		m.Notify.SendToWorker(j.WorkerID, protocol.EventJobCancel, cancel)
		m.Notify.CloseWorkerStream(j.WorkerID, "a preempted attempt was not confirmed stopped")
	case nj.Status == protocol.JobQueued: // withdrawn
		// A stream that swallowed a job_submit is not to be trusted with the
		// next one: close it so the worker re-registers and reconciles.
		m.Notify.SendToWorker(j.WorkerID, protocol.EventJobCancel, cancel)
		m.Notify.CloseWorkerStream(j.WorkerID, "dispatch not acknowledged")
	}
}
