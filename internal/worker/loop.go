package worker

import (
	"context"
	"time"
)

// Messages to the loop that are not tied to the connection.
type (
	drainRequested struct{}
	drainExpired   struct{} // worker.drain_timeout passed since the first Drain
)

// post hands m to the session loop; after the loop ended it is dropped.
func (w *Worker) post(m any) {
	select {
	case w.msgs <- m:
	case <-w.loopDone:
	}
}

// session is the loop's own connection state.
type session struct {
	gen    int // connection generation: messages of older ones are ignored
	retry  *backoff
	retryC <-chan time.Time
	kick   chan struct{} // wakes the reporter
	fence  *time.Ticker  // self-fence checks; its period follows the limit

	// While the token in force is refused (see onTokenRefused): the source
	// (tokenWhere) is re-read on tokenC until tokenDeadline; tokenErr is the
	// last error reading it, logged once.
	tokenTick     *time.Ticker
	tokenC        <-chan time.Time
	tokenDeadline time.Time
	tokenWhere    string
	tokenErr      string
}

// Serve runs the session until ctx is cancelled (the job is stopped and reported
// cancelled, the worker disconnects: nil), the worker finishes by itself (drained,
// or an ephemeral worker with nothing left to do: nil), or the orchestrator
// rejects the token and no new one comes (ErrAuthRejected).
func (w *Worker) Serve(ctx context.Context) error {
	runCtx, cancel := context.WithCancel(ctx)
	defer func() {
		close(w.loopDone)
		cancel()
		w.wg.Wait()
		w.out.spool.close()
		if w.stateLock != nil {
			w.stateLock.Close() // the state directory is free for the next workerd
		}
	}()
	s := &session{
		retry: newBackoff(w.opt.Timers.ReconnectBase, w.opt.ReconnectMax),
		kick:  make(chan struct{}, 1),
	}
	hbCtx, hbCancel := context.WithCancel(runCtx)
	hbStop, hbDone := make(chan struct{}), make(chan struct{})
	w.stopHeartbeats = func(ctx context.Context) {
		// A beat already on the wire is answered first, so the orchestrator
		// has handled it before the goodbye; one still unanswered when ctx
		// ends is cut off.
		close(hbStop)
		select {
		case <-hbDone:
		case <-ctx.Done():
			hbCancel()
			<-hbDone
		}
	}
	w.wg.Add(3)
	go func() { defer w.wg.Done(); defer close(hbDone); w.beats.run(hbCtx, hbStop) }()
	go func() { defer w.wg.Done(); w.out.run(runCtx, s.kick, w.post) }()
	go func() {
		defer w.wg.Done()
		w.gpus.run(runCtx, w.opt.GPUWatchInterval, w.post, w.beats.soon, func() bool { return !w.slots.idle() })
	}()
	w.dial(runCtx, s)

	s.fence = time.NewTicker(fenceTick(w.link.fenceLimit()))
	defer s.fence.Stop()
	defer s.stopTokenWait()
	for {
		var (
			done bool
			err  error
		)
		select {
		case <-ctx.Done():
			return w.shutdown("the worker was stopped")
		case <-s.retryC:
			s.retryC = nil
			w.dial(runCtx, s)
		case <-s.fence.C:
			w.checkFence()
			done, err = w.checkIdleDrain(false)
		case <-s.tokenC:
			done, err = w.pollToken(runCtx, s)
		case m := <-w.msgs:
			done, err = w.handle(runCtx, s, m)
		}
		if done {
			return err
		}
	}
}

func (w *Worker) dial(ctx context.Context, s *session) {
	s.gen++
	w.link.progressed()
	w.wg.Add(1)
	go w.connect(ctx, s.gen)
}

// reconnect schedules the next connection attempt with back-off.
func (w *Worker) reconnect(s *session, why error) {
	// Dispatches that waited for a stop are the orchestrator's to withdraw
	// now: registering again tells it they are not running.
	w.deferred = nil
	d := s.retry.next()
	n := s.retry.attempts()
	w.link.reconnecting(n)
	w.log.Warn("not connected to the orchestrator; retrying", "err", why, "attempt", n, "in", d.Round(time.Millisecond).String())
	s.retryC = time.After(d)
}

func (w *Worker) handle(ctx context.Context, s *session, m any) (bool, error) {
	switch m := m.(type) {
	case registered:
		if m.gen != s.gen {
			return false, nil
		}
		if m.err != nil {
			if isAuthError(m.err) {
				return w.onTokenRefused(ctx, s, m.err, true)
			}
			if err := unfixable(w.c, m.err); err != nil {
				w.log.Error("configuration error; not retrying", "url", w.opt.URL, "err", err)
				w.stopAndWait(stopFence, "the connection to the orchestrator is misconfigured")
				return true, err
			}
			if isSessionRefused(m.err) {
				w.log.Error("another simpletuner-workerd is connected with this worker's token; this one takes no job and "+
					"keeps asking, and takes over only once that one is offline. Give each machine a worker (and token) of its own",
					"err", m.err)
			}
			failoverAfter(w.c, w.log, m)
			w.reconnect(s, m.err)
			return false, nil
		}
		if w.books.settle(m.leftOut) {
			w.reconnect(s, errFencedMeanwhile)
			return false, nil
		}
		w.onRegistered(ctx, s, m.resp, m.sent)
	case streamOpened:
		if m.gen == s.gen {
			w.link.up()
			w.log.Info("stream connected")
		}
	case streamEvent:
		if m.gen == s.gen {
			return w.onEvent(ctx, m.ev)
		}
	case streamEnded:
		if m.gen != s.gen {
			return false, nil
		}
		if isAuthError(m.err) {
			return w.onTokenRefused(ctx, s, m.err, true)
		}
		if m.upFor >= w.opt.Timers.StableAfter {
			s.retry.reset()
		}
		w.reconnect(s, m.err)
	case heartbeatReply:
		if w.gpus.clearFences(m.resp.ClearGPUs) {
			w.beats.soon()
		}
		// A cancel names a job; it is for the attempt the heartbeat listed.
		// A newer attempt of the job, dispatched here since (a requeue after
		// a GPU fault comes back at once), is not the one meant; if it is to
		// stop too, the next heartbeat, which lists it, says so.
		for _, id := range m.resp.Cancel {
			if a := w.slots.holder(id); a != nil && a.n == m.listed[id] {
				w.stopJob(a, stopCancel, "cancelled by the orchestrator", a.grace)
			}
		}
		if m.resp.Drain {
			return w.onOrchestratorDrain("heartbeat reply")
		}
	case authRejected:
		return w.onTokenRefused(ctx, s, m.err, false)
	case tokenCheck:
		return w.pollToken(ctx, s)
	case drainRequested:
		return w.checkIdleDrain(true)
	case drainExpired:
		if len(w.slots.running()) == 0 {
			return false, nil // the drain ends by itself once the reports are in
		}
		w.log.Warn("the drain did not finish within worker.drain_timeout; stopping the running jobs with their grace",
			"drain_timeout", w.opt.DrainTimeout.String(), "jobs", len(w.slots.running()))
		return true, w.shutdown("the drain did not finish within worker.drain_timeout (" + w.opt.DrainTimeout.String() + ")")
	case jobEnded:
		w.endAttempt(ctx, m.a)
	case checkpointRestored:
		w.onRestored(ctx, m)
	case jobTimedOut:
		if a := m.a; w.slots.isCurrent(a) {
			w.stopJob(a, stopTimeout, a.timedOut(), a.grace)
		}
	case staleAttempt:
		if a := m.a; w.slots.isCurrent(a) {
			w.stopJob(a, stopAbandon, "the orchestrator gave this job to another attempt", 0)
		}
	case reportDone:
		return w.afterJob(ctx)
	case gpuEvent:
		w.onGPUEvent(m.ev)
	case gpuFaulted:
		w.onGPUFault(m.index, m.reason)
	case gpuSample:
		w.onGPUSample(m)
	}
	return false, nil
}
