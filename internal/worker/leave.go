package worker

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"sync"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

func (w *Worker) onOrchestratorDrain(source string) (bool, error) {
	w.mu.Lock()
	first := !w.orchDrain
	w.orchDrain = true
	idle := w.slots.idle()
	w.mu.Unlock()
	if first {
		w.log.Info("the orchestrator drains this worker", "source", source)
	}
	if idle && !w.link.isPersistent() {
		return true, w.leave("drained by the orchestrator")
	}
	return false, nil
}

// checkIdleDrain ends a locally drained worker once no job runs.
func (w *Worker) checkIdleDrain(announce bool) (bool, error) {
	w.mu.Lock()
	idle, draining := w.slots.idle(), w.localDrain.Load()
	w.mu.Unlock()
	if idle && draining {
		return true, w.leave("drained")
	}
	if draining && announce {
		w.log.Info("draining: the worker exits once the running jobs end")
	}
	return false, nil
}

// afterJob runs when an ended attempt was reported: drained workers and ephemeral
// workers with nothing queued leave.
func (w *Worker) afterJob(ctx context.Context) (bool, error) {
	w.mu.Lock()
	idle, local, orch := w.slots.idle(), w.localDrain.Load(), w.orchDrain
	w.mu.Unlock()
	id := w.link.id()
	switch {
	case !idle:
		return false, nil
	case local:
		return true, w.leave("drained")
	case w.link.isPersistent():
		return false, nil
	case orch:
		return true, w.leave("drained by the orchestrator")
	}
	var q protocol.QueueCheckResponse
	err := w.c.DoJSON(ctx, w.opt.Timers.RequestTimeout, "queue check", http.MethodGet,
		"/api/workers/queue?worker_id="+url.QueryEscape(id), nil, &q)
	if err == nil && q.HasJobs {
		w.log.Info("ephemeral worker: more jobs are queued; staying")
		return false, nil
	}
	if err != nil {
		w.log.Warn("ephemeral worker: queue check failed; treating it as empty", "err", err)
	}
	return true, w.leave("ephemeral worker: no more queued jobs")
}

// leave is the orderly exit with no job running: last reports, then disconnect.
func (w *Worker) leave(why string) error {
	w.log.Info("leaving", "reason", why)
	w.finalReportsAndDisconnect()
	return nil
}

// shutdown stops the running job (reported cancelled), flushes reports and
// disconnects.
func (w *Worker) shutdown(why string) error {
	w.log.Info("shutting down", "reason", why)
	w.stopAndWait(stopShutdown, "worker shutting down: "+why)
	w.finalReportsAndDisconnect()
	return nil
}

// authFailed ends the worker after a 401: the job is stopped and Serve returns
// ErrAuthRejected. Its outcome stays spooled like a self-fenced one (sent only after
// the next registration, with a new token), so the orchestrator requeues the job
// rather than ending it as cancelled.
func (w *Worker) authFailed(err error) error {
	w.log.Error(ErrAuthRejected.Error(), "token", tokenHint(w.c.Token().Get()), "err", err)
	w.stopAndWait(stopFence, "the worker token was rejected")
	return ErrAuthRejected
}

// stopAndWait stops every running job and waits for them to be gone (SIGKILL
// comes after the grace, so this is bounded). Each job's report, which lets
// the orchestrator requeue it, waits for its last checkpoint's upload; the
// jobs' uploads and reports run side by side, so the time they take is one
// bound per worker, not per job.
func (w *Worker) stopAndWait(why stopReason, detail string) {
	running := w.slots.running()
	for _, a := range running {
		w.stopJob(a, why, detail, a.grace)
	}
	var ends sync.WaitGroup
	for _, a := range running {
		a.waitGone()
		rec, report, spooled := w.closeAttempt(a)
		ends.Go(func() { a.finishOnShutdown(rec, report, spooled) })
	}
	ends.Wait()
}

// finalReportsAndDisconnect sends what is spooled and says goodbye, each bounded by
// ShutdownTimeout; failures are fine (reports stay spooled, the orchestrator
// notices the missing heartbeats).
func (w *Worker) finalReportsAndDisconnect() {
	ctx, cancel := context.WithTimeout(context.Background(), w.opt.Timers.ShutdownTimeout)
	defer cancel()
	if err := w.out.flush(ctx, true); err != nil {
		w.log.Warn("some job reports stay spooled for the next start", "err", err)
	}
	id := w.link.id()
	if id == "" {
		return
	}
	// No heartbeat may follow the goodbye and make the worker look alive again.
	w.stopHeartbeats(ctx)
	err := w.c.DoJSON(ctx, w.opt.Timers.ShutdownTimeout, "disconnect", http.MethodPost, "/api/workers/disconnect",
		protocol.DisconnectRequest{WorkerID: id}, nil)
	if err != nil && !errors.Is(err, context.Canceled) {
		w.log.Warn("disconnect failed", "err", err)
		return
	}
	w.log.Info("disconnected from the orchestrator")
}
