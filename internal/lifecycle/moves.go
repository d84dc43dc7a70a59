// Package lifecycle is the job lifecycle of simpletuner-orchestratord in one
// place: which moves of a job between states are legal, who may cause each,
// what each does to the job's current attempt, and the rule that derives a
// worker's status from the attempts it runs.
//
// It decides and never acts: no I/O, no clock, no store. The store checks every
// transition against Moves inside its compare-and-set, so an illegal move is
// refused whoever asks for it; the orchestrator asks the decision functions
// (OnReport, OnLoss, OnCancel, OnDeadline) what to do and hands the answer to
// the store.
package lifecycle

import (
	"fmt"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// Cause says why a job moves, and so who may move it.
type Cause string

const (
	// Claim: the scheduler hands a queued job to a worker (a new attempt).
	Claim Cause = "claim"
	// Report: the worker holding the current attempt reports on it.
	Report Cause = "report"
	// Loss: the attempt's worker is gone or let go of the attempt unasked
	// (heartbeat timeout, disconnect, re-registration or heartbeats without
	// it, its stream closed during dispatch, an admin deleted the worker).
	Loss Cause = "loss"
	// Deadline: a timer ran out (dispatch not acknowledged, cancel not
	// confirmed, the job's own timeout).
	Deadline Cause = "deadline"
	// Cancel: a user with the queue.cancel scope asked to cancel the job.
	Cancel Cause = "cancel"
	// Preempt: the scheduler takes the attempt's GPUs back for a job of a
	// team under its share of the fleet, or of higher priority.
	Preempt Cause = "preempt"
	// Approve and Reject: a lead of the job's team (or an admin) decides on
	// a job an approval rule held at submit.
	Approve Cause = "approve"
	Reject  Cause = "reject"
	// DependsOn: a job this one depends on ended, so its dependencies are
	// now all met, or one can never be.
	DependsOn Cause = "dependency"
)

// Causes lists every cause, in the order the documentation shows them.
var Causes = []Cause{Claim, Report, Loss, Deadline, Cancel, Preempt, Approve, Reject, DependsOn}

// Who names who brings a cause about, for the documentation.
func (c Cause) Who() string {
	switch c {
	case Claim:
		return "the scheduler"
	case Report:
		return "the worker's status report"
	case Loss:
		return "the health loop, heartbeat and registration reconciliation, a disconnect, an admin deleting the worker, a worker reporting that it was stopped on purpose"
	case Deadline:
		return "the scheduler's deadline scan"
	case Cancel:
		return "a user (scope queue.cancel)"
	case Preempt:
		return "the scheduler, for a waiting job of a team under its share or of higher priority ([jobs] preemption)"
	case Approve, Reject:
		return "a lead of the job's team or an admin (scope queue.approve), for a job an approval rule held"
	case DependsOn:
		return "the end of a job it depends on, in the same transaction"
	}
	return string(c)
}

// Move is one legal change of a job's state.
type Move struct {
	From, To protocol.JobStatus
	By       Cause
	// Ends is the outcome the current attempt ends with; "" leaves it open.
	Ends protocol.AttemptOutcome
	// Ack marks the current attempt acknowledged (started).
	Ack bool
	// MaySpendRetry: the move may count against the job's max_retries.
	MaySpendRetry bool
	// Why is a short description for the documentation.
	Why string
}

// States lists every job state, in lifecycle order.
var States = []protocol.JobStatus{
	protocol.JobPendingApproval, protocol.JobWaiting, protocol.JobQueued, protocol.JobDispatched, protocol.JobRunning, protocol.JobCanceling,
	protocol.JobCompleted, protocol.JobFailed, protocol.JobCancelled,
}

// Moves is the whole lifecycle: a move not listed here never happens. A
// terminal state has no move out.
var Moves = []Move{
	{From: protocol.JobPendingApproval, To: protocol.JobQueued, By: Approve, Why: "approved: it joins the queue"},
	{From: protocol.JobPendingApproval, To: protocol.JobWaiting, By: Approve, Why: "approved, and it depends on other jobs: it waits for them"},
	{From: protocol.JobPendingApproval, To: protocol.JobCancelled, By: Reject, Why: "rejected (the error names who and why)"},
	{From: protocol.JobPendingApproval, To: protocol.JobCancelled, By: Cancel, Why: "cancelled while it waited for approval"},

	{From: protocol.JobWaiting, To: protocol.JobQueued, By: DependsOn, Why: "every job it depends on ended as it asked: it joins the queue"},
	{From: protocol.JobWaiting, To: protocol.JobCancelled, By: DependsOn, Why: "a job it depends on ended otherwise, so it can never run (the error names that job)"},
	{From: protocol.JobWaiting, To: protocol.JobCancelled, By: Cancel, Why: "cancelled while it waited for its dependencies"},

	{From: protocol.JobQueued, To: protocol.JobDispatched, By: Claim, Why: "claimed for a worker: attempt n+1 begins"},
	{From: protocol.JobQueued, To: protocol.JobCancelled, By: Cancel, Why: "cancelled before any attempt"},

	{From: protocol.JobDispatched, To: protocol.JobRunning, By: Report, Ack: true, Why: "the worker acknowledged (starting, running or training)"},
	{From: protocol.JobDispatched, To: protocol.JobCompleted, By: Report, Ends: protocol.OutcomeCompleted, Ack: true, Why: "finished before its start was reported"},
	{From: protocol.JobDispatched, To: protocol.JobFailed, By: Report, Ends: protocol.OutcomeFailed, Why: "could not start"},
	{From: protocol.JobDispatched, To: protocol.JobQueued, By: Loss, Ends: protocol.OutcomeWithdrawn, MaySpendRetry: true, Why: "worker gone before it acknowledged: withdrawn, no retry spent for the first 3 such losses, then one each"},
	{From: protocol.JobDispatched, To: protocol.JobFailed, By: Loss, Ends: protocol.OutcomeWithdrawn, Why: "worker gone before it acknowledged, past the free losses, with no retry left (a job that crashes its workers)"},
	{From: protocol.JobDispatched, To: protocol.JobQueued, By: Deadline, Ends: protocol.OutcomeWithdrawn, Why: "not acknowledged within the ack deadline: withdrawn, no retry spent"},
	{From: protocol.JobDispatched, To: protocol.JobCanceling, By: Cancel, Why: "cancel sent to the worker"},
	{From: protocol.JobDispatched, To: protocol.JobQueued, By: Report, Ends: protocol.OutcomeGPUFault, Why: "one of its GPUs failed as it started: requeued, no retry spent"},

	{From: protocol.JobRunning, To: protocol.JobRunning, By: Report, Why: "progress"},
	{From: protocol.JobRunning, To: protocol.JobCompleted, By: Report, Ends: protocol.OutcomeCompleted, Why: "training succeeded"},
	{From: protocol.JobRunning, To: protocol.JobFailed, By: Report, Ends: protocol.OutcomeFailed, Why: "training failed"},
	{From: protocol.JobRunning, To: protocol.JobQueued, By: Loss, Ends: protocol.OutcomeWorkerLost, MaySpendRetry: true, Why: "worker lost: requeued while retries remain (no retry spent when an admin deleted or stopped the worker)"},
	{From: protocol.JobRunning, To: protocol.JobFailed, By: Loss, Ends: protocol.OutcomeWorkerLost, Why: "worker lost with no retry left"},
	{From: protocol.JobRunning, To: protocol.JobFailed, By: Deadline, Ends: protocol.OutcomeTimeout, Why: "ran past timeout_seconds"},
	{From: protocol.JobRunning, To: protocol.JobCanceling, By: Cancel, Why: "cancel sent to the worker"},
	{From: protocol.JobRunning, To: protocol.JobQueued, By: Report, Ends: protocol.OutcomeGPUFault, Why: "the worker stopped it because one of its GPUs failed: requeued, no retry spent"},
	{From: protocol.JobRunning, To: protocol.JobCanceling, By: Preempt, Why: "preempted: the worker is told to stop it, as for a cancel (SIGTERM, then cancel_grace)"},

	{From: protocol.JobCanceling, To: protocol.JobCancelled, By: Report, Ends: protocol.OutcomeCancelled, Why: "the worker confirmed the cancel"},
	{From: protocol.JobCanceling, To: protocol.JobCompleted, By: Report, Ends: protocol.OutcomeCompleted, Why: "finished before the cancel took effect"},
	{From: protocol.JobCanceling, To: protocol.JobFailed, By: Report, Ends: protocol.OutcomeFailed, Why: "failed before the cancel took effect"},
	{From: protocol.JobCanceling, To: protocol.JobCancelled, By: Loss, Ends: protocol.OutcomeCancelled, Why: "worker gone while cancelling"},
	{From: protocol.JobCanceling, To: protocol.JobCancelled, By: Deadline, Ends: protocol.OutcomeCancelled, Why: "no confirmation within grace + cancel_report_timeout: the attempt is fenced"},
	{From: protocol.JobCanceling, To: protocol.JobQueued, By: Report, Ends: protocol.OutcomePreempted, Why: "a preempted attempt stopped: requeued, no retry spent (the next attempt resumes from the last checkpoint)"},
	{From: protocol.JobCanceling, To: protocol.JobQueued, By: Loss, Ends: protocol.OutcomePreempted, Why: "worker gone while a preempted attempt was stopping: requeued, no retry spent"},
	{From: protocol.JobCanceling, To: protocol.JobQueued, By: Deadline, Ends: protocol.OutcomePreempted, Why: "a preempted attempt not confirmed stopped within grace + cancel_report_timeout: fenced and requeued, no retry spent"},
	{From: protocol.JobCanceling, To: protocol.JobCanceling, By: Cancel, Why: "a user cancelled a job being preempted: it ends cancelled, not requeued"},
}

// Find returns the move from → to caused by c, or nil when there is none.
func Find(from, to protocol.JobStatus, c Cause) *Move {
	for i := range Moves {
		if m := &Moves[i]; m.From == from && m.To == to && m.By == c {
			return m
		}
	}
	return nil
}

// ErrIllegal is the error of a move the lifecycle does not allow.
type ErrIllegal struct {
	From, To protocol.JobStatus
	By       Cause
	Reason   string
}

func (e *ErrIllegal) Error() string {
	return fmt.Sprintf("illegal job move %s → %s by %s: %s", e.From, e.To, e.By, e.Reason)
}

// Step is what a caller asks of a job: the move and its effects on the
// current attempt.
type Step struct {
	To protocol.JobStatus
	By Cause
	// EndAttempt closes the current attempt with this outcome; it must be the
	// move's Ends.
	EndAttempt protocol.AttemptOutcome
	// Ack marks the current attempt started; allowed where the move has Ack.
	Ack bool
	// SpendRetry counts the move against max_retries; allowed where the move
	// has MaySpendRetry.
	SpendRetry bool
	// Error is the job's new error text; nil keeps the old one.
	Error *string
}

// Check reports whether a job in state from may take step s: the move must be
// in Moves and the step's effects must be the move's. It returns the move.
func Check(from protocol.JobStatus, s Step) (*Move, error) {
	illegal := func(reason string) error { return &ErrIllegal{From: from, To: s.To, By: s.By, Reason: reason} }
	if from.Terminal() {
		return nil, illegal("the job is " + string(from) + ", a terminal state")
	}
	m := Find(from, s.To, s.By)
	switch {
	case m == nil:
		return nil, illegal("not in the lifecycle")
	case s.EndAttempt != m.Ends:
		if m.Ends == "" {
			return nil, illegal("the move does not end the attempt")
		}
		return nil, illegal(fmt.Sprintf("the attempt must end %s, not %q", m.Ends, s.EndAttempt))
	case s.Ack && !m.Ack:
		return nil, illegal("the move does not acknowledge the attempt")
	case s.SpendRetry && !m.MaySpendRetry:
		return nil, illegal("the move spends no retry")
	}
	return m, nil
}

// Successors lists the states a job in state from can move to, each once.
func Successors(from protocol.JobStatus) []protocol.JobStatus {
	var out []protocol.JobStatus
	seen := map[protocol.JobStatus]bool{}
	for _, m := range Moves {
		if m.From == from && !seen[m.To] {
			seen[m.To] = true
			out = append(out, m.To)
		}
	}
	return out
}
