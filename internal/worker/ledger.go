package worker

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// ledger is what the worker answers for to the orchestrator: the attempts
// it runs (the allotment's), less the self-fenced ones it must disown, and
// the ended ones whose terminal report is outstanding. An attempt moves
// from running to finishing, and heartbeats and registrations list both,
// under its lock: the orchestrator sees an attempt in one list or the
// other, never in neither, so it never takes one for lost while its
// outcome is on the way.
type ledger struct {
	slots *allotment

	mu sync.Mutex // comes before the allotment's
	// finishing holds the ended attempts whose terminal report is not yet
	// acknowledged, by key. Self-fenced attempts are left out: they must be
	// reconciled as lost.
	finishing map[string]statusRecord
	// unreconciled holds the keys of self-fenced attempts that no
	// registration has left out yet: their cancelled reports wait until one
	// has, so the orchestrator first takes the attempt for lost and requeues
	// the job.
	unreconciled map[string]bool
}

func newLedger(slots *allotment) *ledger {
	return &ledger{slots: slots, finishing: map[string]statusRecord{}, unreconciled: map[string]bool{}}
}

// noteFinishing records an ended attempt whose report is outstanding.
func (l *ledger) noteFinishing(rec statusRecord) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.noteFinishingLocked(rec)
}

func (l *ledger) noteFinishingLocked(rec statusRecord) {
	if !rec.AfterRegister {
		l.finishing[rec.key()] = rec
	}
}

// retire takes an ended attempt's slot and GPUs back and, when its outcome
// is reported, lists it as finishing, in one step.
func (l *ledger) retire(a *runner, rec statusRecord, report bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.slots.release(a)
	if report {
		l.noteFinishingLocked(rec)
	}
}

// reported forgets an attempt once its report was acknowledged or given up.
func (l *ledger) reported(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.finishing, key)
}

// fence disowns a self-fenced attempt while it is being stopped: the
// orchestrator must take it for lost, not resume it.
func (l *ledger) fence(a *runner) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !a.fenced {
		a.fenced = true
		l.unreconciled[a.key()] = true
	}
}

// settle forgets the self-fenced attempts a registration left out, and
// reports whether any is left: one fenced after the registration was
// composed, which listed it as running. The orchestrator then resumed an
// attempt that is being stopped, so the worker must register again without
// it.
func (l *ledger) settle(leftOut []string) (fencedMeanwhile bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, key := range leftOut {
		delete(l.unreconciled, key)
	}
	return len(l.unreconciled) > 0
}

// unreconciledFence reports whether key is a self-fenced attempt no
// registration has left out yet.
func (l *ledger) unreconciledFence(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.unreconciled[key]
}

// answeredLocked lists the running attempts the worker owns up to: all but
// the self-fenced ones.
func (l *ledger) answeredLocked() []*runner {
	return slices.DeleteFunc(l.slots.running(), func(a *runner) bool { return a.fenced })
}

// snapshot is what a heartbeat or registration lists, taken at once: the
// attempts the worker answers for (the running ones first, then the
// finishing ones), the job of the first running one (protocol 1's
// current_job_id), and the self-fenced attempts it leaves out.
func (l *ledger) snapshot() (attempts []protocol.RunningAttempt, current string, leftOut []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	running := l.answeredLocked()
	for _, a := range running {
		attempts = append(attempts, protocol.RunningAttempt{JobID: a.jobID, Attempt: a.n, State: protocol.AttemptRunning})
	}
	if len(running) > 0 {
		current = running[0].jobID
	}
	var finishing []protocol.RunningAttempt
	for _, rec := range l.finishing {
		finishing = append(finishing, protocol.RunningAttempt{JobID: rec.JobID, Attempt: rec.Attempt,
			State: protocol.AttemptFinishing, Outcome: rec.Status})
	}
	slices.SortFunc(finishing, func(a, b protocol.RunningAttempt) int {
		return cmp.Or(strings.Compare(a.JobID, b.JobID), a.Attempt-b.Attempt)
	})
	return append(attempts, finishing...), current, slices.Collect(maps.Keys(l.unreconciled))
}
