package worker

import (
	"context"
	"net/http"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// reportHook sends what the orchestrator hears of the attempt: the
// dispatch's acknowledgement (starting) and, last of all, its terminal
// report, which the outbox (report.go) keeps spooled until it is answered.
type reportHook struct {
	a            *runner
	acked        bool          // the starting report is on its way (acknowledge)
	progressDone chan struct{} // closed after the starting report was sent
}

// acknowledge sends the dispatch's acknowledgement (starting) off the loop,
// once per attempt. An attempt that starts at once sends it after the
// trainer's exec: on a small machine the request and the orchestrator's
// answer would otherwise take the CPU the launch needs.
func (h *reportHook) acknowledge(ctx context.Context) {
	if h.acked {
		return
	}
	h.acked = true
	h.a.env.wg.Add(1)
	go h.sendProgress(ctx)
}

// sendStatus POSTs one report of the attempt.
func (h *reportHook) sendStatus(ctx context.Context, timeout time.Duration, status, errMsg string) error {
	n := h.a.n
	rep := protocol.StatusReport{Status: status, Attempt: &n}
	if errMsg != "" {
		rep.Error = &errMsg
	}
	return h.a.env.c.DoJSON(ctx, timeout, "report "+status, http.MethodPost, statusPath(h.a.jobID), rep, nil)
}

// sendProgress reports "starting", the dispatch acknowledgement, once the
// trainer was started (a retry's while its checkpoint comes back); it is
// retried a few times, and a 409 means the attempt is stale and the loop
// kills it. No "running" follows: to the orchestrator it would change
// nothing after the acknowledgement.
func (h *reportHook) sendProgress(ctx context.Context) {
	r, env := h.a, h.a.env
	defer env.wg.Done()
	defer close(h.progressDone)
	send := func(status string) bool {
		retry := newBackoff(env.opt.Timers.ReconnectBase, env.opt.Timers.RequestTimeout)
		for try := 0; try < 5; try++ {
			err := h.sendStatus(ctx, env.opt.Timers.RequestTimeout, status, "")
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

// postrun waits, within the drain budget, for the starting report: the
// terminal one must not overtake it.
func (h *reportHook) postrun(ctx context.Context, end *attemptEnd) {
	select {
	case <-h.progressDone:
	case <-end.drain:
	case <-ctx.Done():
	}
}

// deliver sends the terminal report, the attempt's last step: the spooled
// one with the spool's others, or, when the spool could not take it, one
// direct try.
func (h *reportHook) deliver(ctx context.Context, end *attemptEnd) {
	r, env, rec := h.a, h.a.env, end.rec
	switch {
	case !end.report:
		return
	case !end.spooled:
		if err := env.out.send(ctx, env.opt.Timers.RequestTimeout, rec); err != nil {
			r.log.Error("the job's outcome could not be reported", "status", rec.Status, "err", err)
		}
		// Delivered or not, nothing more will come: let the orchestrator's
		// view of this attempt follow.
		env.reported(rec.key())
		return
	}
	env.out.release(rec.key())
	if err := env.out.flush(ctx, false); isAuthError(err) {
		env.post(authRejected{err: err})
	}
}

// shutdown leaves a spooled report to the worker's final flush.
func (h *reportHook) shutdown(end *attemptEnd) {
	h.a.env.out.release(end.rec.key())
}

// lastTry is deliver for an attempt stopped because the worker exits: a
// report the spool could not take gets one direct try.
func (h *reportHook) lastTry(end *attemptEnd) {
	env := h.a.env
	if end.report && !end.spooled {
		ctx, cancel := context.WithTimeout(context.Background(), env.opt.Timers.ShutdownTimeout)
		defer cancel()
		_ = env.out.send(ctx, env.opt.Timers.ShutdownTimeout, end.rec)
		env.reported(end.rec.key())
	}
}
