package lifecycle

import (
	"errors"
	"fmt"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// Job is what the decisions read of a job.
type Job struct {
	ID             string
	Status         protocol.JobStatus
	Attempt        int
	RetriesUsed    int
	MaxRetries     int
	TimeoutSeconds int
	StartedAt      *time.Time
	AckDeadline    *time.Time
	CancelDeadline *time.Time
	// PreemptedBy is set while the attempt is being stopped for preemption
	// (the job is canceling): the job it makes room for, and why. The job
	// is requeued when the attempt ends.
	PreemptedBy string
}

// preempted requeues a job whose preempted attempt ended, at no cost.
func preempted(j Job, by Cause, how string) Step {
	return Step{To: protocol.JobQueued, By: by, EndAttempt: protocol.OutcomePreempted,
		Error: text("attempt %d preempted by %s; %s; requeued without spending a retry", j.Attempt, j.PreemptedBy, how)}
}

func text(format string, args ...any) *string {
	s := fmt.Sprintf(format, args...)
	return &s
}

// OnReport maps a worker's report on its current attempt to a step. ok is
// false when the report changes nothing (a repeated "starting", say, or any
// report on a job with no attempt out); a
// report that carries progress on a running job is a running → running step.
func OnReport(j Job, report, errMsg string, hasProgress bool) (s Step, ok bool) {
	if !j.Status.Active() {
		return Step{}, false // no attempt out: nothing to report on
	}
	var errText *string
	if errMsg != "" {
		errText = &errMsg
	}
	switch report {
	case protocol.ReportStarting, protocol.ReportTraining, protocol.ReportRunning:
		switch {
		case j.Status == protocol.JobDispatched:
			return Step{To: protocol.JobRunning, By: Report, Ack: true}, true
		case j.Status == protocol.JobRunning && hasProgress:
			return Step{To: protocol.JobRunning, By: Report}, true
		}
		return Step{}, false
	case protocol.ReportCompleted:
		return Step{To: protocol.JobCompleted, By: Report, EndAttempt: protocol.OutcomeCompleted,
			Ack: j.Status == protocol.JobDispatched}, true
	case protocol.ReportFailed:
		if errText == nil {
			errText = text("the training process failed")
		}
		return Step{To: protocol.JobFailed, By: Report, EndAttempt: protocol.OutcomeFailed, Error: errText}, true
	case protocol.ReportCancelled:
		if j.Status == protocol.JobCanceling && j.PreemptedBy != "" {
			return preempted(j, Report, "stopped by its worker"), true
		}
		if j.Status == protocol.JobCanceling {
			return Step{To: protocol.JobCancelled, By: Report, EndAttempt: protocol.OutcomeCancelled, Error: errText}, true
		}
		// Nobody asked for this cancel: the worker gave the job up (shutdown,
		// abandon, self-fence). It is a loss, so the job runs again.
		why := "the worker stopped it without being asked"
		if errMsg != "" {
			why += ": " + errMsg
		}
		return OnLoss(j, why)
	}
	return Step{}, false
}

// OnGPUFault answers a worker's report that it stopped the attempt because
// one of its GPUs failed: the machine failed, not the job, so the job goes
// back to the queue without spending a retry (a canceling job ends
// cancelled, as asked). ok is false for a job with no attempt out.
func OnGPUFault(j Job, why string) (s Step, ok bool) {
	switch {
	case j.Status == protocol.JobCanceling && j.PreemptedBy != "":
		return preempted(j, Report, "its GPU failed meanwhile: "+why), true
	case j.Status == protocol.JobCanceling:
		return Step{To: protocol.JobCancelled, By: Report, EndAttempt: protocol.OutcomeCancelled,
			Error: text("cancelled; its GPU failed meanwhile: %s", why)}, true
	case j.Status == protocol.JobDispatched || j.Status == protocol.JobRunning:
		return Step{To: protocol.JobQueued, By: Report, EndAttempt: protocol.OutcomeGPUFault,
			Error: text("attempt %d stopped: %s; requeued without spending a retry", j.Attempt, why)}, true
	}
	return Step{}, false
}

// FreeRequeues is how many attempts of a job may end without spending a
// retry (withdrawn before they started, or evicted) before a further loss of
// an unacknowledged attempt counts as a retry. A job whose dispatch itself
// kills its workers (a poison job) dies before it is ever acknowledged; with
// every such loss free it would be handed from worker to worker forever.
const FreeRequeues = 3

// freeRequeues counts the job's earlier attempts that ended without spending
// a retry.
func (j Job) freeRequeues() int { return max(j.Attempt-1-j.RetriesUsed, 0) }

// withdrawal takes back an attempt that was never acknowledged, at no cost.
func withdrawal(j Job, why string) Step {
	return Step{To: protocol.JobQueued, By: Loss, EndAttempt: protocol.OutcomeWithdrawn,
		Error: text("attempt %d withdrawn before it started: %s", j.Attempt, why)}
}

// OnLoss ends the current attempt because its worker let go of it: an
// unacknowledged dispatch is withdrawn (no retry spent, FreeRequeues times;
// after that it counts as a retry like a lost running attempt), a canceling
// job ends cancelled, a running one is requeued while retries remain, else
// failed.
// ok is false for a job with no attempt out (queued or terminal).
func OnLoss(j Job, why string) (s Step, ok bool) {
	switch {
	case j.Status == protocol.JobCanceling && j.PreemptedBy != "":
		return preempted(j, Loss, "its worker was lost while it stopped: "+why), true
	case j.Status == protocol.JobCanceling:
		return Step{To: protocol.JobCancelled, By: Loss, EndAttempt: protocol.OutcomeCancelled,
			Error: text("cancelled; the worker was lost before confirming: %s", why)}, true
	case j.Status == protocol.JobDispatched && j.freeRequeues() < FreeRequeues:
		return withdrawal(j, why), true
	case j.Status == protocol.JobDispatched && j.RetriesUsed < j.MaxRetries:
		return Step{To: protocol.JobQueued, By: Loss, EndAttempt: protocol.OutcomeWithdrawn, SpendRetry: true,
			Error: text("attempt %d lost before it started: %s; %d attempts were already lost that way, so this one counts: requeued (retry %d of %d)",
				j.Attempt, why, j.freeRequeues(), j.RetriesUsed+1, j.MaxRetries)}, true
	case j.Status == protocol.JobDispatched:
		return Step{To: protocol.JobFailed, By: Loss, EndAttempt: protocol.OutcomeWithdrawn,
			Error: text("attempt %d lost before it started: %s; %d attempts were already lost that way and no retries remain (%d used): the job may be crashing its workers",
				j.Attempt, why, j.freeRequeues(), j.RetriesUsed)}, true
	case j.Status != protocol.JobRunning:
		return Step{}, false
	case j.RetriesUsed < j.MaxRetries:
		return Step{To: protocol.JobQueued, By: Loss, EndAttempt: protocol.OutcomeWorkerLost, SpendRetry: true,
			Error: text("attempt %d lost: %s; requeued (retry %d of %d)", j.Attempt, why, j.RetriesUsed+1, j.MaxRetries)}, true
	default:
		return Step{To: protocol.JobFailed, By: Loss, EndAttempt: protocol.OutcomeWorkerLost,
			Error: text("attempt %d lost: %s; no retries remain (%d used)", j.Attempt, why, j.RetriesUsed)}, true
	}
}

// OnEviction ends the current attempt because an admin removed its worker.
// Nothing the job did caused it, so a running job is requeued without
// spending a retry, whatever retries remain.
func OnEviction(j Job, why string) (s Step, ok bool) {
	if j.Status == protocol.JobDispatched {
		return withdrawal(j, why), true
	}
	s, ok = OnLoss(j, why)
	if ok && j.Status == protocol.JobRunning {
		s = Step{To: protocol.JobQueued, By: Loss, EndAttempt: protocol.OutcomeWorkerLost,
			Error: text("attempt %d ended: %s; requeued without spending a retry", j.Attempt, why)}
	}
	return s, ok
}

// OnWorkerStop answers a worker's report that it stopped the attempt because
// the worker itself was stopped on purpose (by an admin: a stop signal, the
// end of the drain that followed one). Nothing the job did caused it, so as
// for an eviction (or a preemption) a running job is requeued without
// spending a retry. A job being cancelled or preempted ends as that asked.
func OnWorkerStop(j Job, why string) (s Step, ok bool) {
	if j.Status == protocol.JobCanceling {
		return OnReport(j, protocol.ReportCancelled, why, false)
	}
	if why == "" {
		why = "the worker was stopped"
	}
	return OnEviction(j, "its worker was stopped on purpose ("+why+")")
}

// ErrFinished is returned by OnCancel for a job that already ended.
var ErrFinished = errors.New("the job has already ended")

// OnCancel answers a user's cancel request: a queued job ends at once, an
// active one moves to canceling (the worker is then told), a canceling one
// stays (ok false), a finished one cannot be cancelled.
func OnCancel(j Job) (s Step, ok bool, err error) {
	switch {
	case j.Status.Terminal():
		return Step{}, false, fmt.Errorf("job %s is %s: %w", j.ID, j.Status, ErrFinished)
	case j.Status == protocol.JobQueued:
		return Step{To: protocol.JobCancelled, By: Cancel, Error: text("cancelled before it started")}, true, nil
	case j.Status == protocol.JobPendingApproval:
		return Step{To: protocol.JobCancelled, By: Cancel, Error: text("cancelled while it waited for approval")}, true, nil
	case j.Status == protocol.JobWaiting:
		return Step{To: protocol.JobCancelled, By: Cancel, Error: text("cancelled while it waited for its dependencies")}, true, nil
	case j.Status == protocol.JobCanceling && j.PreemptedBy != "":
		return Step{To: protocol.JobCanceling, By: Cancel}, true, nil // cancelled, not requeued
	case j.Status == protocol.JobCanceling:
		return Step{}, false, nil
	}
	return Step{To: protocol.JobCanceling, By: Cancel}, true, nil
}

// ErrNotHeld is returned by OnApprove and OnReject for a job no approval
// rule holds.
var ErrNotHeld = errors.New("the job is not waiting for approval")

// OnApprove answers a lead's approval of a held job: it joins the queue,
// or, when it depends on other jobs, waits for them.
func OnApprove(j Job, dependsOnJobs bool) (Step, error) {
	if j.Status != protocol.JobPendingApproval {
		return Step{}, fmt.Errorf("job %s is %s: %w", j.ID, j.Status, ErrNotHeld)
	}
	if dependsOnJobs {
		return Step{To: protocol.JobWaiting, By: Approve, Error: text("")}, nil
	}
	return Step{To: protocol.JobQueued, By: Approve, Error: text("")}, nil
}

// OnReject answers a lead's rejection of a held job: it ends cancelled,
// its error naming who rejected it and why.
func OnReject(j Job, by, reason string) (Step, error) {
	if j.Status != protocol.JobPendingApproval {
		return Step{}, fmt.Errorf("job %s is %s: %w", j.ID, j.Status, ErrNotHeld)
	}
	return Step{To: protocol.JobCancelled, By: Reject, Error: text("rejected by %s: %s", by, reason)}, nil
}

// OnPreempt answers the scheduler's choice of a victim: a running job moves
// to canceling (its worker is then told to stop it, as for a cancel) and is
// requeued when the attempt ends. ok is false for any other job: one not yet
// acknowledged costs nothing to leave alone, one canceling is ending anyway.
func OnPreempt(j Job) (s Step, ok bool) {
	if j.Status != protocol.JobRunning {
		return Step{}, false
	}
	return Step{To: protocol.JobCanceling, By: Preempt}, true
}

// OnDeadline reports the step a passed deadline calls for at now: a dispatch
// nobody acknowledged is withdrawn, a cancel nobody confirmed ends cancelled, a
// job running past its timeout fails.
func OnDeadline(j Job, now time.Time) (s Step, ok bool) {
	switch {
	case j.Status == protocol.JobDispatched && j.AckDeadline != nil && now.After(*j.AckDeadline):
		return Step{To: protocol.JobQueued, By: Deadline, EndAttempt: protocol.OutcomeWithdrawn,
			Error: text("no acknowledgement within the ack deadline")}, true
	case j.Status == protocol.JobCanceling && j.PreemptedBy != "" && j.CancelDeadline != nil && now.After(*j.CancelDeadline):
		return preempted(j, Deadline, "its worker did not confirm the stop in time; the attempt is fenced"), true
	case j.Status == protocol.JobCanceling && j.CancelDeadline != nil && now.After(*j.CancelDeadline):
		return Step{To: protocol.JobCancelled, By: Deadline, EndAttempt: protocol.OutcomeCancelled,
			Error: text("cancelled; the worker did not confirm in time")}, true
	case j.Status == protocol.JobRunning && j.TimeoutSeconds > 0 && j.StartedAt != nil:
		limit := time.Duration(j.TimeoutSeconds) * time.Second
		if now.After(j.StartedAt.Add(limit)) {
			return Step{To: protocol.JobFailed, By: Deadline, EndAttempt: protocol.OutcomeTimeout,
				Error: text("exceeded its timeout of %s", limit)}, true
		}
	}
	return Step{}, false
}

// Resumable reports whether a worker that says it runs attempt n of j may
// keep it: the attempt is the job's current one (n 0 means the worker did not
// say, as protocol 1 does not) and still out.
func Resumable(j Job, onWorker bool, n int) bool {
	return onWorker && j.Status.Active() && (n == 0 || n == j.Attempt)
}
