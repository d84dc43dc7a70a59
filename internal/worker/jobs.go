package worker

import (
	"context"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

func (w *Worker) onSubmit(ctx context.Context, ev *protocol.JobSubmitEvent) {
	settings := w.currentJobSettings()
	a := &attempt{
		jobID: ev.JobID, n: ev.Attempt, ev: ev, settings: settings, grace: settings.grace(ev.CancelGraceSeconds),
		log:          w.log.With("job_id", ev.JobID, "attempt", ev.Attempt),
		launched:     make(chan struct{}),
		ended:        make(chan struct{}),
		progressDone: make(chan struct{}),
	}
	w.mu.Lock()
	cur, draining := w.jobs[ev.JobID], w.localDrain
	devs, whole, refused := w.gpusForLocked(ev)
	take := cur == nil && !draining && refused == ""
	if take {
		a.gpus, a.whole = devs, whole
		w.jobs[ev.JobID] = a
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
	case refused != "":
		w.log.Warn("not taking job: "+refused, "job_id", ev.JobID, "attempt", ev.Attempt)
		return
	}
	indices := make([]int, len(a.gpus))
	for i, d := range a.gpus {
		indices[i] = d.Index
	}
	a.log.Info("job received", "config_name", ev.ConfigName, "gpus", indices)
	w.crash.fire(w, "receive", ev)

	w.wg.Add(1)
	go w.sendProgress(ctx, a)
	if w.restoreFirst(ctx, a) {
		return // onRestored starts it
	}
	w.startAttempt(ctx, a)
}

// startAttempt launches a's trainer and what runs beside it.
func (w *Worker) startAttempt(ctx context.Context, a *attempt) {
	w.launch(a)
	if a.startErr != nil {
		a.log.Error("could not start training", "err", a.startErr)
		w.endAttempt(ctx, a)
		return
	}
	ev := a.ev
	w.crash.fire(w, "run", ev)
	w.watchCheckpoints(ctx, a)
	if ev.LogEndpoint != "" {
		a.ship = newShipper(w.c, ev.LogEndpoint, a.n, a.spool, w.opt.Timers.LogPoll,
			w.opt.Timers.ReconnectBase, w.opt.ReconnectMax, a.log)
		w.wg.Add(1)
		go func() { defer w.wg.Done(); a.ship.run(ctx) }()
	}
	if ev.TimeoutSeconds > 0 {
		a.timeout = time.AfterFunc(time.Duration(ev.TimeoutSeconds*float64(time.Second)), func() { w.post(jobTimedOut{a: a}) })
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		select {
		case <-a.proc.Done():
			w.post(jobEnded{a: a})
		case <-ctx.Done():
		}
	}()
}

// stopJob stops a's process tree: SIGTERM now, SIGKILL after grace. The first
// reason is kept, except that "abandoned" overrides (it suppresses the report).
func (w *Worker) stopJob(a *attempt, why stopReason, detail string, grace time.Duration) {
	switch {
	case a.stop == why:
		// Repeated (a heartbeat reply repeats a cancel): only the SIGKILL may come sooner.
	case a.stop == notStopped || why == stopAbandon:
		a.stop, a.stopDetail = why, detail
		a.log.Info("stopping training", "reason", detail, "grace", grace.String())
	}
	if a.stop == stopFence {
		w.mu.Lock()
		if !a.fenced {
			a.fenced = true
			w.unreconciled[a.key()] = true
		}
		w.mu.Unlock()
	}
	if a.proc != nil {
		a.proc.Stop(grace)
	} else if a.ckpt.cancel != nil {
		a.ckpt.cancel() // still getting its checkpoint back: it never starts
	}
}

// endAttempt runs when a's process tree is gone (or never started): the outcome is
// spooled to disk and reported off the loop.
func (w *Worker) endAttempt(ctx context.Context, a *attempt) {
	rec, report, spooled := w.closeAttempt(a)
	w.wg.Add(1)
	go w.finish(ctx, a, rec, report, spooled)
}

// closeAttempt is the synchronous part of ending an attempt.
func (w *Worker) closeAttempt(a *attempt) (rec statusRecord, report, spooled bool) {
	if a.timeout != nil {
		a.timeout.Stop()
	}
	if a.spool != nil {
		_ = a.spool.Close()
	}
	select {
	case <-a.ended:
	default:
		close(a.ended)
	}
	rec, report = a.record()
	if report {
		a.log.Info("training ended", "status", rec.Status, "error", rec.Error)
		w.hold(rec.key())
		if err := w.spool.put(rec); err != nil {
			w.release(rec.key())
			a.log.Error("cannot spool the job's outcome", "err", err)
		} else {
			spooled = true
		}
	} else {
		a.log.Info("training stopped; not reported, the orchestrator moved on", "reason", a.stopDetail)
	}
	// The attempt stops being the running job and becomes a finishing one in
	// the same critical section: a heartbeat sees one or the other, never
	// neither.
	w.mu.Lock()
	if w.jobs[a.jobID] == a {
		delete(w.jobs, a.jobID)
	}
	if report {
		w.noteFinishingLocked(rec)
	}
	w.mu.Unlock()
	return rec, report, spooled
}
