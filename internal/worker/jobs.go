package worker

import (
	"context"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// The loop's side of an attempt: it decides whether a dispatch is taken,
// creates its runner, tells it to stop, and tears it down once its process
// tree is gone. What needs the other attempts (the slots and GPUs they hold,
// which the allotment keeps, and what the heartbeats list) is decided here,
// never in the runner.

func (w *Worker) onSubmit(ctx context.Context, ev *protocol.JobSubmitEvent) {
	a := newRunner(&w.runnerEnv, ev, w.currentJobSettings())
	var cur *runner
	var refused string
	w.mu.Lock()
	draining := w.localDrain.Load()
	if draining {
		cur = w.slots.holder(ev.JobID)
	} else {
		cur, refused = w.slots.reserve(a)
	}
	if cur == nil && !draining && refused == "" {
		w.orchDrain = false // a dispatch means the orchestrator resumed this worker
	}
	w.mu.Unlock()
	switch {
	case cur != nil && cur.matches(ev.JobID, ev.Attempt):
		return // a repeated dispatch of what already runs
	case cur != nil:
		w.log.Warn("another attempt of this job runs here; ignoring job_submit", "job_id", ev.JobID, "running", cur.n, "attempt", ev.Attempt)
		return
	case draining:
		w.log.Warn("draining; not taking job", "job_id", ev.JobID)
		return
	case refused != "" && w.slots.anyStopping():
		// The orchestrator freed the slot when it fenced or preempted an
		// attempt that is still stopping here: the job starts when the stop
		// is done, within the grace, instead of waiting out the
		// orchestrator's ack timeout.
		w.log.Info("job waits for an attempt stopping here", "job_id", ev.JobID, "attempt", ev.Attempt, "now", refused)
		w.deferred = append(w.deferred, ev)
		return
	case refused != "":
		w.log.Warn("not taking job: "+refused, "job_id", ev.JobID, "attempt", ev.Attempt)
		return
	}
	if a.begin(ctx) {
		return // onRestored starts it
	}
	w.startAttempt(ctx, a)
}

// startAttempt has a's runner start the trainer; one that could not start
// ends at once.
func (w *Worker) startAttempt(ctx context.Context, a *runner) {
	if !a.start(ctx) {
		w.endAttempt(ctx, a)
	}
}

// onRestored starts the attempt whose restore is over, unless it was
// stopped meanwhile.
func (w *Worker) onRestored(ctx context.Context, m checkpointRestored) {
	a := m.a
	current := w.slots.isCurrent(a)
	switch {
	case a.ckpt.restoreOver(m, current):
		w.startAttempt(ctx, a)
	case current:
		w.endAttempt(ctx, a) // stopped while its checkpoint came back
	}
}

// stopJob stops a's process tree: SIGTERM now, SIGKILL after grace. The first
// reason is kept, except that "abandoned" overrides (it suppresses the report).
// A self-fenced attempt leaves the heartbeats and registrations before its
// process is signalled.
func (w *Worker) stopJob(a *runner, why stopReason, detail string, grace time.Duration) {
	if a.setStop(why, detail, grace) == stopFence {
		w.books.fence(a)
	}
	a.halt(grace)
}

// endAttempt runs when a's process tree is gone (or never started): the outcome is
// spooled to disk and reported off the loop. The jobs that waited for a stop
// are offered its room.
func (w *Worker) endAttempt(ctx context.Context, a *runner) {
	rec, report, spooled := w.closeAttempt(a)
	w.wg.Add(1)
	go a.finish(ctx, rec, report, spooled)
	waiting := w.deferred
	w.deferred = nil
	for _, ev := range waiting {
		w.onSubmit(ctx, ev)
	}
}

// closeAttempt is the synchronous part of ending an attempt: the runner
// spools its outcome, and the attempt stops being a running one.
func (w *Worker) closeAttempt(a *runner) (rec statusRecord, report, spooled bool) {
	rec, report, spooled = a.close()
	// The attempt stops being the running job and becomes a finishing one in
	// the same critical section: a heartbeat sees one or the other, never
	// neither.
	w.books.retire(a, rec, report)
	return rec, report, spooled
}

// waitingDispatches are the dispatches that wait for an attempt stopping
// here to give up its room (the session loop's alone).
type waitingDispatches []*protocol.JobSubmitEvent

// drop forgets a waiting dispatch when it is cancelled; it reports whether
// there was one.
func (d *waitingDispatches) drop(jobID string, attempt int) bool {
	for i, ev := range *d {
		if ev.JobID == jobID && (attempt == 0 || ev.Attempt == attempt) {
			*d = append((*d)[:i], (*d)[i+1:]...)
			return true
		}
	}
	return false
}
