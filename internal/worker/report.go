package worker

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// How an attempt's outcome reaches the orchestrator. Its runner acknowledges
// the dispatch (starting), and when the attempt ended it spools the terminal
// report, waits for the log, and sends it. The outbox holds the spooled
// reports, of this process's attempts and of earlier ones; the Worker
// flushes it before each registration, periodically, and after each
// attempt, since what may go when depends on the session (see flushReports).

// Messages from report goroutines to the loop.
type (
	// staleAttempt: the orchestrator answered 409 to a report of a running
	// attempt; it gave the job to someone else, so the process must die.
	staleAttempt struct{ a *runner }
	// reportDone: an ended attempt's log and terminal report were dealt with.
	reportDone struct{ a *runner }
)

// outbox is the terminal reports on their way: the spool journal, and the
// records the periodic flusher leaves alone while their log ships.
type outbox struct {
	spool *statusSpool
	c     *client
	gpus  *gpuWatch
	// flushMu: one flush of the spool at a time.
	flushMu sync.Mutex

	mu   sync.Mutex
	held map[string]bool
}

func statusPath(jobID string) string {
	return "/api/workers/job/" + url.PathEscape(jobID) + "/status"
}

// sendStatus POSTs one report of the attempt.
func (r *runner) sendStatus(ctx context.Context, timeout time.Duration, status, errMsg string) error {
	n := r.n
	rep := protocol.StatusReport{Status: status, Attempt: &n}
	if errMsg != "" {
		rep.Error = &errMsg
	}
	return r.env.c.DoJSON(ctx, timeout, "report "+status, http.MethodPost, statusPath(r.jobID), rep, nil)
}

// send POSTs an ended attempt's terminal report, with what it used.
func (o *outbox) send(ctx context.Context, timeout time.Duration, rec statusRecord) error {
	n := rec.Attempt
	rep := protocol.StatusReport{Status: rec.Status, Attempt: &n, Usage: rec.Usage, Fault: rec.Fault,
		Shutdown: rec.Shutdown, GPUConditions: o.gpus.conditions()}
	if rec.Error != "" {
		rep.Error = &rec.Error
	}
	return o.c.DoJSON(ctx, timeout, "report "+rec.Status, http.MethodPost, statusPath(rec.JobID), rep, nil)
}

// sendProgress reports "starting", the dispatch acknowledgement, once the
// trainer was started (a retry's while its checkpoint comes back); it is retried a few times, and a 409 means the
// attempt is stale and the loop kills it. No "running" follows: to the
// orchestrator it would change nothing after the acknowledgement.
func (r *runner) sendProgress(ctx context.Context) {
	env := r.env
	defer env.wg.Done()
	defer close(r.progressDone)
	send := func(status string) bool {
		retry := newBackoff(env.opt.Timers.ReconnectBase, env.opt.Timers.RequestTimeout)
		for try := 0; try < 5; try++ {
			err := r.sendStatus(ctx, env.opt.Timers.RequestTimeout, status, "")
			switch code := statusOf(err); {
			case err == nil:
				return true
			case code == http.StatusConflict:
				r.log.Warn("the orchestrator says this attempt is stale; stopping it", "report", status, "err", err)
				env.post(staleAttempt{a: r})
				return false
			case code == http.StatusUnauthorized:
				env.post(authRejected{err: err})
				if !env.c.Token().WaitUntilUsable(ctx, r.ended) {
					return false
				}
				continue
			case code >= 400 && code < 500:
				r.log.Warn("status report refused", "report", status, "err", err)
				return true
			default:
				r.log.Warn("status report failed; retrying", "report", status, "err", err)
			}
			select {
			case <-ctx.Done():
				return false
			case <-r.ended:
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
func (r *runner) finish(ctx context.Context, rec statusRecord, report, spooled bool) {
	env := r.env
	defer env.wg.Done()
	defer env.post(reportDone{a: r})
	wait := time.NewTimer(env.opt.Timers.LogDrain)
	defer wait.Stop()
	select {
	case <-r.progressDone:
	case <-wait.C:
	case <-ctx.Done():
	}
	if r.ship != nil {
		select {
		case <-r.ship.done:
		case <-wait.C:
			r.log.Warn("the job's log is still shipping; reporting the outcome first")
		case <-ctx.Done():
		}
	}
	r.holdDirtyGPUs()
	r.finishCheckpoints(ctx, rec, report)
	switch {
	case !report:
		return
	case !spooled:
		// The spool could not be written: one direct try is the best left.
		if err := env.out.send(ctx, env.opt.Timers.RequestTimeout, rec); err != nil {
			r.log.Error("the job's outcome could not be reported", "status", rec.Status, "err", err)
		}
		// Delivered or not, nothing more will come: let the orchestrator's
		// view of this attempt follow.
		env.reported(rec.key())
		return
	}
	env.out.release(rec.key())
	if err := env.flushReports(ctx, false); isAuthError(err) {
		env.post(authRejected{err: err})
	}
}

// lastReport is finish for an attempt stopped because the worker exits: the
// spooled report goes with the worker's final flush, so the log's tail gets
// only a moment, and a report the spool could not take one direct try.
func (r *runner) lastReport(rec statusRecord, report, spooled bool) {
	env := r.env
	env.out.release(rec.key())
	if r.ship != nil {
		// A moment for the log's tail; it is in the journal in any case.
		select {
		case <-r.ship.done:
		case <-time.After(min(env.opt.Timers.ShutdownTimeout, 2*time.Second)):
		}
	}
	if report && !spooled {
		ctx, cancel := context.WithTimeout(context.Background(), env.opt.Timers.ShutdownTimeout)
		defer cancel()
		_ = env.out.send(ctx, env.opt.Timers.ShutdownTimeout, rec)
		env.reported(rec.key())
	}
}

// hold keeps the periodic flusher off a record until its log shipped.
func (o *outbox) hold(key string) {
	o.mu.Lock()
	o.held[key] = true
	o.mu.Unlock()
}

func (o *outbox) release(key string) {
	o.mu.Lock()
	delete(o.held, key)
	o.mu.Unlock()
}

func (o *outbox) isHeld(key string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.held[key]
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
	w.out.flushMu.Lock()
	defer w.out.flushMu.Unlock()
	recs, errs := w.out.spool.list()
	for _, err := range errs {
		w.log.Warn("status spool", "err", err)
	}
	for _, rec := range recs {
		held := !beforeRegister && w.out.isHeld(rec.key())
		w.mu.Lock()
		waiting := rec.AfterRegister && (w.unreconciled[rec.key()] || !w.hasRegistered())
		w.mu.Unlock()
		if held || waiting {
			continue
		}
		err := w.out.send(ctx, w.opt.Timers.RequestTimeout, rec)
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
		if err := w.out.spool.remove(rec); err != nil {
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
			if !w.c.Token().WaitUntilUsable(ctx, nil) {
				return
			}
		} else if err != nil && !errors.Is(err, context.Canceled) {
			w.log.Debug("spooled reports not flushed", "err", err)
		}
	}
}
