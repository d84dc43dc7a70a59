package worker

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// How an attempt's outcome reaches the orchestrator. Its runner's
// reportHook (hook_report.go) acknowledges the dispatch (starting); when the
// attempt ended, the runner spools the terminal report and, once the other
// hooks are done, the reportHook sends it. The outbox holds the spooled
// reports, of this process's attempts and of earlier ones, and flushes it
// before each registration, periodically, and after each attempt; what may
// go when depends on the session, which it reads from the ledger and the
// link (see flush).

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
	spool  *statusSpool
	c      *client
	gpus   *gpuWatch
	log    *slog.Logger
	timers *Timers
	books  *ledger // an acknowledged report ends the attempt's finishing
	link   *link   // a self-fenced attempt's report waits for a registration
	// flushMu: one flush of the spool at a time.
	flushMu sync.Mutex

	mu   sync.Mutex
	held map[string]bool
}

func statusPath(jobID string) string {
	return "/api/workers/job/" + url.PathEscape(jobID) + "/status"
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

// flush sends the spooled terminal reports. A record is dropped once the
// orchestrator acknowledged it (2xx) or can never take it: 409 (the attempt is
// stale, the orchestrator moved on), 404 (it does not know the job), other 4xx.
// A self-fenced record waits for a registration that left its attempt out (one
// made by this process: the attempt of a record from an earlier process can no
// longer be listed); a record whose
// log is still shipping waits for it unless beforeRegister (see connect). It stops at
// the first transport or 5xx error (the orchestrator is down; try later) and
// returns that error, or the 401.
func (o *outbox) flush(ctx context.Context, beforeRegister bool) error {
	o.flushMu.Lock()
	defer o.flushMu.Unlock()
	recs, errs := o.spool.list()
	for _, err := range errs {
		o.log.Warn("status spool", "err", err)
	}
	for _, rec := range recs {
		held := !beforeRegister && o.isHeld(rec.key())
		waiting := rec.AfterRegister && (o.books.unreconciledFence(rec.key()) || !o.link.hasRegistered())
		if held || waiting {
			continue
		}
		err := o.send(ctx, o.timers.RequestTimeout, rec)
		code := statusOf(err)
		switch {
		case err == nil:
			o.log.Info("reported job outcome", "job_id", rec.JobID, "attempt", rec.Attempt, "status", rec.Status, "error", rec.Error)
		case code == http.StatusConflict:
			o.log.Info("the orchestrator had moved on from this attempt; dropping its report",
				"job_id", rec.JobID, "attempt", rec.Attempt, "status", rec.Status)
		case code == http.StatusUnauthorized:
			return err
		case code >= 400 && code < 500 && code != http.StatusRequestTimeout && code != http.StatusTooManyRequests:
			o.log.Warn("the orchestrator refused a job report; dropping it", "job_id", rec.JobID, "attempt", rec.Attempt, "err", err)
		default:
			o.log.Warn("job report not delivered; it stays spooled and is re-sent", "job_id", rec.JobID, "attempt", rec.Attempt, "err", err)
			return err
		}
		if err := o.spool.remove(rec); err != nil {
			o.log.Warn("status spool", "err", err)
		}
		o.books.reported(rec.key())
	}
	return nil
}

// run re-sends spooled reports periodically (and when kicked), so an
// outcome reaches the orchestrator even if the stream never comes back but plain
// requests do.
func (o *outbox) run(ctx context.Context, kick <-chan struct{}, post func(any)) {
	t := time.NewTicker(o.timers.ReportRetry)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-kick:
		}
		if err := o.flush(ctx, false); isAuthError(err) {
			post(authRejected{err: err})
			if !o.c.Token().WaitUntilUsable(ctx, nil) {
				return
			}
		} else if err != nil && !errors.Is(err, context.Canceled) {
			o.log.Debug("spooled reports not flushed", "err", err)
		}
	}
}
