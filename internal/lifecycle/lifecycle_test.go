package lifecycle

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// Every (from, to, cause) triple: legal exactly when Moves lists it, and then
// only with the move's own effects.
func TestCheckIsTheTable(t *testing.T) {
	for _, from := range States {
		for _, to := range States {
			for _, c := range Causes {
				m := Find(from, to, c)
				step := Step{To: to, By: c}
				if m != nil {
					step.EndAttempt, step.Ack, step.SpendRetry = m.Ends, m.Ack, m.MaySpendRetry
				}
				got, err := Check(from, step)
				switch {
				case m != nil && err != nil:
					t.Errorf("%s → %s by %s is in the table but refused: %v", from, to, c, err)
				case m == nil && err == nil:
					t.Errorf("%s → %s by %s is not in the table but allowed (%+v)", from, to, c, got)
				case m == nil:
					var ill *ErrIllegal
					if !errors.As(err, &ill) || ill.From != from || ill.To != to || ill.By != c {
						t.Errorf("%s → %s by %s: error %v does not name the move", from, to, c, err)
					}
				}
				if m == nil {
					continue
				}
				// The same move with an effect it does not have is refused.
				wrong := []Step{{To: to, By: c, EndAttempt: otherOutcome(m.Ends), Ack: m.Ack}}
				if !m.Ack {
					wrong = append(wrong, Step{To: to, By: c, EndAttempt: m.Ends, Ack: true})
				}
				if !m.MaySpendRetry {
					wrong = append(wrong, Step{To: to, By: c, EndAttempt: m.Ends, Ack: m.Ack, SpendRetry: true})
				}
				for _, bad := range wrong {
					if _, err := Check(from, bad); err == nil {
						t.Errorf("%s → %s by %s with effects %+v allowed", from, to, c, bad)
					}
				}
			}
		}
	}
}

func otherOutcome(o protocol.AttemptOutcome) protocol.AttemptOutcome {
	if o == protocol.OutcomeFailed {
		return protocol.OutcomeCompleted
	}
	return protocol.OutcomeFailed
}

func TestTerminalStatesHaveNoMoveOut(t *testing.T) {
	for _, m := range Moves {
		if m.From.Terminal() {
			t.Errorf("move out of terminal state: %+v", m)
		}
		if !m.From.Valid() || !m.To.Valid() {
			t.Errorf("move with an unknown state: %+v", m)
		}
		// Only an active job has an attempt out to end.
		if m.To.Terminal() && (m.Ends == "") == m.From.Active() {
			t.Errorf("a move into a terminal state must end the attempt if and only if one is out: %+v", m)
		}
	}
}

// Whatever a decision returns must be a legal step from the state it was
// asked about: the decisions and the table cannot disagree.
func TestDecisionsStayInTheTable(t *testing.T) {
	past := time.Unix(0, 0)
	for _, st := range States {
		for _, retries := range []int{0, 3} {
			j := Job{ID: "j_x", Status: st, Attempt: 1, RetriesUsed: retries, MaxRetries: 3,
				TimeoutSeconds: 1, StartedAt: &past, AckDeadline: &past, CancelDeadline: &past}
			try := func(what string, s Step, ok bool) {
				t.Helper()
				if !ok {
					return
				}
				if _, err := Check(st, s); err != nil {
					t.Errorf("%s from %s (retries used %d) asks for an illegal step %+v: %v", what, st, retries, s, err)
				}
			}
			for _, rep := range []string{"starting", "training", "running", "completed", "failed", "cancelled"} {
				for _, progress := range []bool{false, true} {
					s, ok := OnReport(j, rep, "boom", progress)
					try("report "+rep, s, ok)
				}
			}
			s, ok := OnLoss(j, "gone")
			try("loss", s, ok)
			s, ok = OnEviction(j, "deleted")
			try("eviction", s, ok)
			s, ok = OnDeadline(j, time.Now())
			try("deadline", s, ok)
			s, ok = OnGPUFault(j, "GPU 0 is unhealthy")
			try("GPU fault", s, ok)
			if ok && s.SpendRetry {
				t.Errorf("a GPU fault from %s spends a retry", st)
			}
			s, ok = OnWorkerStop(j, "worker shutting down: the worker was stopped")
			try("worker stop", s, ok)
			if ok && s.SpendRetry {
				t.Errorf("a worker stopped on purpose spends a retry of a %s job", st)
			}
			s, ok, err := OnCancel(j)
			if st.Terminal() != (err != nil) || (err != nil && !errors.Is(err, ErrFinished)) {
				t.Errorf("cancel of a %s job: err %v", st, err)
			}
			try("cancel", s, ok)
			held := st == protocol.JobPendingApproval
			s, err = OnApprove(j, false)
			if held != (err == nil) || (err != nil && !errors.Is(err, ErrNotHeld)) {
				t.Errorf("approval of a %s job: err %v", st, err)
			}
			try("approve", s, err == nil)
			s, err = OnReject(j, "person:p_lead", "too big")
			if held != (err == nil) || (err != nil && !errors.Is(err, ErrNotHeld)) {
				t.Errorf("rejection of a %s job: err %v", st, err)
			}
			try("reject", s, err == nil)
		}
	}
}

// A held job is approved into the queue or rejected with who and why; a
// cancel ends it at once, as a queued job's does. Nothing else moves it.
func TestHeldJobMoves(t *testing.T) {
	j := Job{ID: "j_x", Status: protocol.JobPendingApproval}
	if s, err := OnApprove(j, true); err != nil || s.To != protocol.JobWaiting || s.By != Approve {
		t.Fatalf("approve of a job with dependencies: %+v %v", s, err)
	}
	if s, err := OnApprove(j, false); err != nil || s.To != protocol.JobQueued || s.By != Approve || s.Error == nil || *s.Error != "" {
		t.Fatalf("approve: %+v %v", s, err)
	}
	s, err := OnReject(j, "person:p_lead", "asks for 8 GPUs for a test")
	if err != nil || s.To != protocol.JobCancelled || s.By != Reject || *s.Error != "rejected by person:p_lead: asks for 8 GPUs for a test" {
		t.Fatalf("reject: %+v %v", s, err)
	}
	if s, ok, err := OnCancel(j); err != nil || !ok || s.To != protocol.JobCancelled || s.By != Cancel {
		t.Fatalf("cancel: %+v %v %v", s, ok, err)
	}
	if j.Status.Terminal() || j.Status.Active() || !j.Status.Valid() {
		t.Fatal("pending_approval must be valid, neither terminal nor active")
	}
	for _, to := range Successors(protocol.JobPendingApproval) {
		if to != protocol.JobQueued && to != protocol.JobWaiting && to != protocol.JobCancelled {
			t.Errorf("a held job may move to %s", to)
		}
	}
	if _, ok := OnPreempt(j); ok {
		t.Error("a held job was preempted")
	}
	if _, ok := OnDeadline(j, time.Now()); ok {
		t.Error("a held job met a deadline")
	}
}

func TestLossRules(t *testing.T) {
	cases := []struct {
		status  protocol.JobStatus
		used    int
		to      protocol.JobStatus
		outcome protocol.AttemptOutcome
		spend   bool
	}{
		{protocol.JobDispatched, 0, protocol.JobQueued, protocol.OutcomeWithdrawn, false},
		{protocol.JobDispatched, 3, protocol.JobQueued, protocol.OutcomeWithdrawn, false},
		{protocol.JobRunning, 0, protocol.JobQueued, protocol.OutcomeWorkerLost, true},
		{protocol.JobRunning, 3, protocol.JobFailed, protocol.OutcomeWorkerLost, false},
		{protocol.JobCanceling, 0, protocol.JobCancelled, protocol.OutcomeCancelled, false},
	}
	for _, c := range cases {
		s, ok := OnLoss(Job{Status: c.status, Attempt: 2, RetriesUsed: c.used, MaxRetries: 3}, "gone")
		if !ok || s.To != c.to || s.EndAttempt != c.outcome || s.SpendRetry != c.spend || s.Error == nil {
			t.Errorf("loss of %s with %d retries used: %+v %v", c.status, c.used, s, ok)
		}
	}
	for _, st := range []protocol.JobStatus{protocol.JobQueued, protocol.JobCompleted, protocol.JobFailed, protocol.JobCancelled} {
		if _, ok := OnLoss(Job{Status: st}, "gone"); ok {
			t.Errorf("loss of a %s job asked for a step", st)
		}
	}
	if s, _ := OnEviction(Job{Status: protocol.JobRunning, RetriesUsed: 3, MaxRetries: 3}, "deleted"); s.To != protocol.JobQueued || s.SpendRetry {
		t.Errorf("eviction of a running job with no retries left: %+v", s)
	}
}

// A worker stopped on purpose (an admin's stop signal) requeues its running
// job without spending a retry, even with none left, as a preemption does;
// a cancel or a preemption under way ends as asked.
func TestWorkerStopSpendsNoRetry(t *testing.T) {
	const why = "worker shutting down: the worker was stopped"
	s, ok := OnWorkerStop(Job{Status: protocol.JobRunning, Attempt: 2, RetriesUsed: 3, MaxRetries: 3}, why)
	if !ok || s.To != protocol.JobQueued || s.SpendRetry || s.EndAttempt != protocol.OutcomeWorkerLost ||
		*s.Error != "attempt 2 ended: its worker was stopped on purpose ("+why+"); requeued without spending a retry" {
		t.Errorf("running job: %+v %v (%s)", s, ok, deref(s.Error))
	}
	if s, _ := OnWorkerStop(Job{Status: protocol.JobDispatched, Attempt: 1}, why); s.To != protocol.JobQueued || s.SpendRetry ||
		s.EndAttempt != protocol.OutcomeWithdrawn {
		t.Errorf("unacknowledged job: %+v", s)
	}
	if s, _ := OnWorkerStop(Job{Status: protocol.JobCanceling, Attempt: 1}, why); s.To != protocol.JobCancelled {
		t.Errorf("job being cancelled: %+v", s)
	}
	if s, _ := OnWorkerStop(Job{Status: protocol.JobCanceling, Attempt: 1, PreemptedBy: "j_b"}, why); s.EndAttempt != protocol.OutcomePreempted {
		t.Errorf("job being preempted: %+v", s)
	}
	if _, ok := OnWorkerStop(Job{Status: protocol.JobQueued}, why); ok {
		t.Error("a queued job moved")
	}
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// A job lost before its start again and again (a job whose dispatch crashes
// its workers) is withdrawn for free FreeRequeues times, then each such loss
// spends a retry, and it fails when none remain, saying why.
func TestRepeatedWithdrawalsSpendRetries(t *testing.T) {
	j := Job{Status: protocol.JobDispatched, Attempt: 1, MaxRetries: 2}
	var last Step
	for j.Status == protocol.JobDispatched {
		s, ok := OnLoss(j, "the worker re-registered without it")
		if !ok {
			t.Fatalf("no step for %+v", j)
		}
		if _, err := Check(j.Status, s); err != nil {
			t.Fatalf("step %+v refused: %v", s, err)
		}
		if want := j.Attempt > FreeRequeues; s.SpendRetry != want && s.To == protocol.JobQueued {
			t.Fatalf("attempt %d: spends a retry %v, want %v", j.Attempt, s.SpendRetry, want)
		}
		if s.SpendRetry {
			j.RetriesUsed++
		}
		last = s
		if s.To != protocol.JobQueued {
			break
		}
		j.Attempt++ // claimed again, lost again
	}
	if last.To != protocol.JobFailed || j.Attempt != FreeRequeues+3 || j.RetriesUsed != 2 {
		t.Fatalf("ended %s after %d attempts with %d retries used; want failed after %d attempts, 2 retries",
			last.To, j.Attempt, j.RetriesUsed, FreeRequeues+3)
	}
	if !strings.Contains(*last.Error, "no retries remain (2 used)") {
		t.Fatalf("reason %q does not name the retries", *last.Error)
	}
	// An admin deleting the worker is never the job's fault.
	if s, _ := OnEviction(Job{Status: protocol.JobDispatched, Attempt: 9, MaxRetries: 1}, "deleted"); s.To != protocol.JobQueued || s.SpendRetry {
		t.Errorf("eviction of an unacknowledged attempt after many withdrawals: %+v", s)
	}
	// The ack deadline (a slow or unreachable worker) stays free.
	past := time.Now().Add(-time.Second)
	if s, _ := OnDeadline(Job{Status: protocol.JobDispatched, Attempt: 9, AckDeadline: &past}, time.Now()); s.SpendRetry {
		t.Errorf("ack deadline spent a retry: %+v", s)
	}
}

func TestWorkerStatusRule(t *testing.T) {
	const (
		idle       = protocol.WorkerIdle
		partial    = protocol.WorkerPartial
		busy       = protocol.WorkerBusy
		draining   = protocol.WorkerDraining
		offline    = protocol.WorkerOffline
		connecting = protocol.WorkerConnecting
	)
	one := func(running int) Load { return Load{Running: running, Slots: 1} }
	for _, c := range []struct {
		cur           protocol.WorkerStatus
		load          Load
		settle, alive protocol.WorkerStatus
	}{
		{idle, one(0), idle, idle}, {idle, one(1), busy, busy}, {busy, one(0), idle, idle}, {busy, one(1), busy, busy},
		{draining, one(0), draining, draining}, {draining, one(1), draining, draining},
		{offline, one(0), offline, idle}, {offline, one(1), offline, busy},
		{connecting, one(0), connecting, idle},
		// Several slots: room left is partial; no slot or no GPU left is busy.
		{idle, Load{Running: 1, Slots: 4, GPUs: 4, GPUsUsed: 1}, partial, partial},
		{partial, Load{Running: 2, Slots: 4, GPUs: 4, GPUsUsed: 4}, busy, busy},
		{busy, Load{Running: 1, Slots: 4, GPUs: 4, GPUsUsed: 2}, partial, partial},
		{partial, Load{Running: 2, Slots: 2, GPUs: 8, GPUsUsed: 2}, busy, busy},
		{partial, Load{Slots: 4, GPUs: 4}, idle, idle},
		{offline, Load{Running: 1, Slots: 4, GPUs: 4, GPUsUsed: 1}, offline, partial},
	} {
		if got := Settle(c.cur, c.load); got != c.settle {
			t.Errorf("Settle(%s, %+v) = %s, want %s", c.cur, c.load, got, c.settle)
		}
		if got := Alive(c.cur, c.load); got != c.alive {
			t.Errorf("Alive(%s, %+v) = %s, want %s", c.cur, c.load, got, c.alive)
		}
	}
	if got := Resumed(one(0), true); got != idle {
		t.Errorf("Resumed(idle load) = %s", got)
	}
	if got := Resumed(Load{Running: 1, Slots: 4, GPUs: 4, GPUsUsed: 1}, true); got != partial {
		t.Errorf("Resumed(partial load) = %s", got)
	}
	if got := Resumed(one(0), false); got != connecting {
		t.Errorf("Resumed(never connected) = %s, want connecting", got)
	}
	for _, c := range []struct {
		cur  protocol.WorkerStatus
		load Load
		want bool
	}{
		{idle, one(0), true}, {busy, one(1), false}, {busy, one(0), false}, {draining, one(0), false}, {offline, one(0), false},
		{partial, Load{Running: 1, Slots: 4, GPUs: 4, GPUsUsed: 1}, true},
		{partial, Load{Running: 1, Slots: 4, GPUs: 4, GPUsUsed: 4}, false},
		{idle, Load{Slots: 2}, true}, // no GPUs: slots alone
	} {
		if got := CanClaim(c.cur, c.load); got != c.want {
			t.Errorf("CanClaim(%s, %+v) = %v", c.cur, c.load, got)
		}
	}
}
