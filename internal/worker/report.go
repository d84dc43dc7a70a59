package worker

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// Messages from report goroutines to the loop.
type (
	// staleAttempt: the orchestrator answered 409 to a report of a running
	// attempt; it gave the job to someone else, so the process must die.
	staleAttempt struct{ a *attempt }
	// reportDone: an ended attempt's log and terminal report were dealt with.
	reportDone struct{ a *attempt }
)

func statusPath(jobID string) string {
	return "/api/workers/job/" + url.PathEscape(jobID) + "/status"
}

// sendStatus POSTs one report for (jobID, attempt).
func (w *Worker) sendStatus(ctx context.Context, timeout time.Duration, jobID string, attempt int, status, errMsg string) error {
	n := attempt
	rep := protocol.StatusReport{Status: status, Attempt: &n}
	if errMsg != "" {
		rep.Error = &errMsg
	}
	return w.c.doJSON(ctx, timeout, "report "+status, http.MethodPost, statusPath(jobID), rep, nil)
}

// sendReport POSTs an ended attempt's terminal report, with what it used.
func (w *Worker) sendReport(ctx context.Context, timeout time.Duration, rec statusRecord) error {
	n := rec.Attempt
	rep := protocol.StatusReport{Status: rec.Status, Attempt: &n, Usage: rec.Usage, Fault: rec.Fault,
		GPUConditions: w.gpus.conditions()}
	if rec.Error != "" {
		rep.Error = &rec.Error
	}
	return w.c.doJSON(ctx, timeout, "report "+rec.Status, http.MethodPost, statusPath(rec.JobID), rep, nil)
}

// sendProgress reports "starting", the dispatch acknowledgement, while the
// job is being launched; it is retried a few times, and a 409 means the
// attempt is stale and the loop kills it. No "running" follows: to the
// orchestrator it would change nothing after the acknowledgement.
func (w *Worker) sendProgress(ctx context.Context, a *attempt) {
	defer w.wg.Done()
	defer close(a.progressDone)
	send := func(status string) bool {
		retry := newBackoff(w.opt.Timers.ReconnectBase, w.opt.Timers.RequestTimeout)
		for try := 0; try < 5; try++ {
			err := w.sendStatus(ctx, w.opt.Timers.RequestTimeout, a.jobID, a.n, status, "")
			switch code := statusOf(err); {
			case err == nil:
				return true
			case code == http.StatusConflict:
				a.log.Warn("the orchestrator says this attempt is stale; stopping it", "report", status, "err", err)
				w.post(staleAttempt{a: a})
				return false
			case code == http.StatusUnauthorized:
				w.post(authRejected{err: err})
				if !w.waitTokenUsable(ctx, a.ended) {
					return false
				}
				continue
			case code >= 400 && code < 500:
				a.log.Warn("status report refused", "report", status, "err", err)
				return true
			default:
				a.log.Warn("status report failed; retrying", "report", status, "err", err)
			}
			select {
			case <-ctx.Done():
				return false
			case <-a.ended:
				return false
			case <-time.After(retry.next()):
			}
		}
		return true
	}
	send(protocol.ReportStarting)
}

// finish deals with an ended attempt off the loop: it waits (bounded) for the
// progress reports and the log to ship, then sends the spooled terminal report.
func (w *Worker) finish(ctx context.Context, a *attempt, rec statusRecord, report, spooled bool) {
	defer w.wg.Done()
	defer w.post(reportDone{a: a})
	wait := time.NewTimer(w.opt.Timers.LogDrain)
	defer wait.Stop()
	select {
	case <-a.progressDone:
	case <-wait.C:
	case <-ctx.Done():
	}
	if a.ship != nil {
		select {
		case <-a.ship.done:
		case <-wait.C:
			a.log.Warn("the job's log is still shipping; reporting the outcome first")
		case <-ctx.Done():
		}
	}
	if len(a.gpus) > 0 && a.proc != nil {
		// Before the report frees its GPUs at the orchestrator: one the job
		// left a process on is held back first, and the report says so.
		if held := w.gpus.holdLeftovers(a.gpus, w.opt.Timers.GPUSettle); len(held) > 0 {
			a.log.Warn("the job's GPUs are not clean after it ended; holding them back", "gpus", held)
		}
	}
	switch {
	case !report:
		return
	case !spooled:
		// The spool could not be written: one direct try is the best left.
		if err := w.sendReport(ctx, w.opt.Timers.RequestTimeout, rec); err != nil {
			a.log.Error("the job's outcome could not be reported", "status", rec.Status, "err", err)
		}
		// Delivered or not, nothing more will come: let the orchestrator's
		// view of this attempt follow.
		w.reported(rec.key())
		return
	}
	w.release(rec.key())
	if err := w.flushReports(ctx, false); isAuthError(err) {
		w.post(authRejected{err: err})
	}
}

// hold keeps the periodic flusher off a record until its log shipped.
func (w *Worker) hold(key string) {
	w.mu.Lock()
	w.held[key] = true
	w.mu.Unlock()
}

func (w *Worker) release(key string) {
	w.mu.Lock()
	delete(w.held, key)
	w.mu.Unlock()
}

// flushReports sends the spooled terminal reports. A record is dropped once the
// orchestrator acknowledged it (2xx) or can never take it: 409 (the attempt is
// stale, the orchestrator moved on), 404 (it does not know the job), other 4xx.
// A self-fenced record waits for a registration that left its attempt out (one
// made by this process: the attempt of a record from an earlier process can no
// longer be listed); a record whose
// log is still shipping waits for it unless beforeRegister (see connect). It stops at
// the first transport or 5xx error (the orchestrator is down; try later) and
// returns that error, or the 401.
func (w *Worker) flushReports(ctx context.Context, beforeRegister bool) error {
	w.flushMu.Lock()
	defer w.flushMu.Unlock()
	recs, errs := w.spool.list()
	for _, err := range errs {
		w.log.Warn("status spool", "err", err)
	}
	for _, rec := range recs {
		w.mu.Lock()
		held := w.held[rec.key()] && !beforeRegister
		waiting := rec.AfterRegister && (w.unreconciled[rec.key()] || !w.hasRegistered())
		w.mu.Unlock()
		if held || waiting {
			continue
		}
		err := w.sendReport(ctx, w.opt.Timers.RequestTimeout, rec)
		code := statusOf(err)
		switch {
		case err == nil:
			w.log.Info("reported job outcome", "job_id", rec.JobID, "attempt", rec.Attempt, "status", rec.Status, "error", rec.Error)
		case code == http.StatusConflict:
			w.log.Info("the orchestrator had moved on from this attempt; dropping its report",
				"job_id", rec.JobID, "attempt", rec.Attempt, "status", rec.Status)
		case code == http.StatusUnauthorized:
			return err
		case code >= 400 && code < 500 && code != http.StatusRequestTimeout && code != http.StatusTooManyRequests:
			w.log.Warn("the orchestrator refused a job report; dropping it", "job_id", rec.JobID, "attempt", rec.Attempt, "err", err)
		default:
			w.log.Warn("job report not delivered; it stays spooled and is re-sent", "job_id", rec.JobID, "attempt", rec.Attempt, "err", err)
			return err
		}
		if err := w.spool.remove(rec); err != nil {
			w.log.Warn("status spool", "err", err)
		}
		w.reported(rec.key())
	}
	return nil
}

// reporterLoop re-sends spooled reports periodically (and when kicked), so an
// outcome reaches the orchestrator even if the stream never comes back but plain
// requests do.
func (w *Worker) reporterLoop(ctx context.Context, kick <-chan struct{}) {
	defer w.wg.Done()
	t := time.NewTicker(w.opt.Timers.ReportRetry)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-kick:
		}
		if err := w.flushReports(ctx, false); isAuthError(err) {
			w.post(authRejected{err: err})
			if !w.waitTokenUsable(ctx, nil) {
				return
			}
		} else if err != nil && !errors.Is(err, context.Canceled) {
			w.log.Debug("spooled reports not flushed", "err", err)
		}
	}
}
