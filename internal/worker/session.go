package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// Messages to the loop that are not tied to the connection.
type (
	drainRequested struct{}
	jobEnded       struct{ a *attempt }
	jobTimedOut    struct{ a *attempt }
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
}

// Serve runs the session until ctx is cancelled (the job is stopped and reported
// cancelled, the worker disconnects: nil), the worker finishes by itself (drained,
// or an ephemeral worker with nothing left to do: nil), or the orchestrator
// rejects the token (ErrAuthRejected).
func (w *Worker) Serve(ctx context.Context) error {
	runCtx, cancel := context.WithCancel(ctx)
	defer func() {
		close(w.loopDone)
		cancel()
		w.wg.Wait()
	}()
	s := &session{
		retry: newBackoff(w.opt.Timers.ReconnectBase, w.opt.ReconnectMax),
		kick:  make(chan struct{}, 1),
	}
	hbCtx, hbCancel := context.WithCancel(runCtx)
	hbDone := make(chan struct{})
	w.stopHeartbeats = func() { hbCancel(); <-hbDone }
	w.wg.Add(2)
	go func() { defer close(hbDone); w.heartbeatLoop(hbCtx) }()
	go w.reporterLoop(runCtx, s.kick)
	w.dial(runCtx, s)

	fence := time.NewTicker(min(max(w.opt.SelfFenceAfter/10, 10*time.Millisecond), 5*time.Second))
	defer fence.Stop()
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
		case <-fence.C:
			w.checkFence()
			done, err = w.checkIdleDrain(false)
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
	w.mu.Lock()
	w.lastProgress = time.Now()
	w.mu.Unlock()
	w.wg.Add(1)
	go w.connect(ctx, s.gen)
}

// reconnect schedules the next connection attempt with back-off.
func (w *Worker) reconnect(s *session, why error) {
	d := s.retry.next()
	w.mu.Lock()
	w.connected = false
	w.retries = s.retry.attempts()
	w.lastProgress = time.Now()
	n := w.retries
	w.mu.Unlock()
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
				return true, w.authFailed(m.err)
			}
			w.reconnect(s, m.err)
			return false, nil
		}
		w.onRegistered(ctx, s, m.resp)
	case streamOpened:
		if m.gen == s.gen {
			w.mu.Lock()
			w.connected = true
			w.retries = 0
			w.mu.Unlock()
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
			return true, w.authFailed(m.err)
		}
		if m.upFor >= w.opt.Timers.StableAfter {
			s.retry.reset()
		}
		w.reconnect(s, m.err)
	case heartbeatReply:
		for _, id := range m.resp.Cancel {
			if a := w.current(); a != nil && a.jobID == id {
				w.stopJob(a, stopCancel, "cancelled by the orchestrator", a.grace)
			}
		}
		if m.resp.Drain {
			return w.onOrchestratorDrain("heartbeat reply")
		}
	case authRejected:
		return true, w.authFailed(m.err)
	case drainRequested:
		return w.checkIdleDrain(true)
	case jobEnded:
		w.endAttempt(ctx, m.a)
	case jobTimedOut:
		if a := w.current(); a == m.a {
			w.stopJob(a, stopTimeout, fmt.Sprintf("timed out after %s", time.Duration(a.ev.TimeoutSeconds*float64(time.Second))), a.grace)
		}
	case staleAttempt:
		if a := w.current(); a == m.a {
			w.stopJob(a, stopAbandon, "the orchestrator gave this job to another attempt", 0)
		}
	case reportDone:
		return w.afterJob(ctx)
	}
	return false, nil
}

func (w *Worker) current() *attempt {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.job
}

func (w *Worker) onRegistered(ctx context.Context, s *session, resp protocol.RegisterResponse) {
	now := time.Now()
	w.mu.Lock()
	w.workerID = resp.WorkerID
	if resp.HeartbeatIntervalSeconds > 0 {
		w.hbInterval = time.Duration(resp.HeartbeatIntervalSeconds * float64(time.Second))
	}
	w.lastAck = now // the orchestrator just heard from us
	w.lastRegister = now
	w.lastProgress = now
	w.mu.Unlock()
	w.registeredOnce.Do(func() { close(w.registered) })
	w.log.Info("registered with the orchestrator", "worker_id", resp.WorkerID, "protocol", resp.Protocol)
	w.reconcile(resp)
	select { // self-fenced reports may go now
	case s.kick <- struct{}{}:
	default:
	}
	w.wg.Add(1)
	go w.stream(ctx, s.gen, resp.WorkerID)
}

// reconcile applies the registration's verdict on the attempt this worker runs.
// An abandoned attempt is stopped without a report: the orchestrator already ended
// it, and a report could only be refused (409) or, worse, be mistaken for news.
func (w *Worker) reconcile(resp protocol.RegisterResponse) {
	a := w.current()
	if a == nil {
		return
	}
	abandon, resume := false, false
	for _, r := range resp.Abandon {
		abandon = abandon || a.matches(r.JobID, r.Attempt)
	}
	for _, r := range resp.Resume {
		resume = resume || a.matches(r.JobID, r.Attempt)
	}
	if resp.AbandonJob != nil && *resp.AbandonJob == a.jobID && len(resp.Resume) == 0 {
		abandon = true
	}
	if resp.ResumeJob != nil && resp.ResumeJob.JobID == a.jobID {
		resume = true
	}
	switch {
	case abandon:
		w.stopJob(a, stopAbandon, "the orchestrator abandoned this attempt", a.grace)
	case resume:
		a.log.Info("the orchestrator resumed the running attempt")
	default:
		a.log.Warn("the orchestrator neither resumed nor abandoned the running attempt; keeping it")
	}
}

// onEvent handles one stream event. The type comes from "event:", or from the
// JSON's "type" when the orchestrator sent none (upstream's pings carry neither).
func (w *Worker) onEvent(ctx context.Context, ev sseEvent) (bool, error) {
	typ := ev.Event
	if typ == "" || typ == "message" {
		var head struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal([]byte(ev.Data), &head)
		typ = head.Type
	}
	switch typ {
	case "", protocol.EventPing:
	case protocol.EventJobSubmit:
		var sub protocol.JobSubmitEvent
		if err := json.Unmarshal([]byte(ev.Data), &sub); err != nil || sub.JobID == "" {
			w.log.Warn("ignoring a malformed job_submit", "err", err)
			return false, nil
		}
		w.onSubmit(ctx, &sub)
	case protocol.EventJobCancel:
		var c protocol.JobCancelEvent
		if err := json.Unmarshal([]byte(ev.Data), &c); err != nil {
			w.log.Warn("ignoring a malformed job_cancel", "err", err)
			return false, nil
		}
		a := w.current()
		if a == nil || !a.matches(c.JobID, c.Attempt) {
			w.log.Info("job_cancel for an attempt this worker does not run; ignored", "job_id", c.JobID, "attempt", c.Attempt)
			return false, nil
		}
		grace := a.grace
		if c.GraceSeconds > 0 {
			grace = time.Duration(c.GraceSeconds * float64(time.Second))
		}
		w.stopJob(a, stopCancel, "cancelled by the orchestrator", grace)
	case protocol.EventDrain:
		return w.onOrchestratorDrain("drain event")
	case protocol.EventShutdown:
		var sh protocol.ShutdownEvent
		_ = json.Unmarshal([]byte(ev.Data), &sh)
		reason := sh.Reason
		if reason == "" {
			reason = sh.Data["reason"]
		}
		w.log.Warn("the orchestrator told the worker to shut down", "reason", reason)
		return true, w.shutdown("the orchestrator shut the worker down (" + reason + ")")
	default:
		w.log.Debug("ignoring an unknown stream event", "type", typ)
	}
	return false, nil
}

func (w *Worker) onSubmit(ctx context.Context, ev *protocol.JobSubmitEvent) {
	w.mu.Lock()
	busy, draining := w.job, w.localDrain
	w.mu.Unlock()
	switch {
	case busy != nil && busy.matches(ev.JobID, ev.Attempt):
		return // a repeated dispatch of what already runs
	case busy != nil:
		w.log.Warn("already running a job; ignoring job_submit", "running", busy.jobID, "job_id", ev.JobID)
		return
	case draining:
		w.log.Warn("draining; not taking job", "job_id", ev.JobID)
		return
	}
	grace := w.opt.CancelGrace
	if ev.CancelGraceSeconds > 0 {
		grace = time.Duration(ev.CancelGraceSeconds * float64(time.Second))
	}
	a := &attempt{
		jobID: ev.JobID, n: ev.Attempt, ev: ev, grace: grace,
		log:          w.log.With("job_id", ev.JobID, "attempt", ev.Attempt),
		launched:     make(chan struct{}),
		ended:        make(chan struct{}),
		progressDone: make(chan struct{}),
	}
	w.mu.Lock()
	w.job = a
	w.orchDrain = false // a dispatch means the orchestrator resumed this worker
	w.mu.Unlock()
	a.log.Info("job received", "config_name", ev.ConfigName)

	w.wg.Add(1)
	go w.sendProgress(ctx, a)
	w.launch(a)
	if a.startErr != nil {
		a.log.Error("could not start training", "err", a.startErr)
		w.endAttempt(ctx, a)
		return
	}
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
	if a.proc != nil {
		a.proc.Stop(grace)
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
	if w.job == a {
		w.job = nil
	}
	if report {
		w.noteFinishingLocked(rec)
	}
	w.mu.Unlock()
	return rec, report, spooled
}

// checkFence stops the running job when heartbeats have not been acknowledged for
// SelfFenceAfter: the orchestrator is about to declare this worker lost and run the
// job elsewhere, and two attempts must never train at once.
func (w *Worker) checkFence() {
	w.mu.Lock()
	a, last := w.job, w.lastAck
	w.mu.Unlock()
	if a == nil || a.stop != notStopped || last.IsZero() {
		return
	}
	if since := time.Since(last); since > w.opt.SelfFenceAfter {
		detail := fmt.Sprintf("self-fenced: no heartbeat acknowledged for %s", since.Round(time.Second))
		a.log.Error("stopping the job: the orchestrator has not acknowledged a heartbeat in time and will give it to another worker",
			"self_fence_after", w.opt.SelfFenceAfter.String())
		w.stopJob(a, stopFence, detail, a.grace)
	}
}

// onOrchestratorDrain: take no new job; an ephemeral worker leaves after its job
// (at once when idle), a persistent one stays connected in draining.
func (w *Worker) onOrchestratorDrain(source string) (bool, error) {
	w.mu.Lock()
	first := !w.orchDrain
	w.orchDrain = true
	idle := w.job == nil
	w.mu.Unlock()
	if first {
		w.log.Info("the orchestrator drains this worker", "source", source)
	}
	if idle && !w.opt.Persistent {
		return true, w.leave("drained by the orchestrator")
	}
	return false, nil
}

// checkIdleDrain ends a locally drained worker once no job runs.
func (w *Worker) checkIdleDrain(announce bool) (bool, error) {
	w.mu.Lock()
	idle, draining := w.job == nil, w.localDrain
	w.mu.Unlock()
	if idle && draining {
		return true, w.leave("drained")
	}
	if draining && announce {
		w.log.Info("draining: the worker exits once the running job ends")
	}
	return false, nil
}

// afterJob runs when an ended attempt was reported: drained workers and ephemeral
// workers with nothing queued leave.
func (w *Worker) afterJob(ctx context.Context) (bool, error) {
	w.mu.Lock()
	idle, local, orch := w.job == nil, w.localDrain, w.orchDrain
	id := w.workerID
	w.mu.Unlock()
	switch {
	case !idle:
		return false, nil
	case local:
		return true, w.leave("drained")
	case w.opt.Persistent:
		return false, nil
	case orch:
		return true, w.leave("drained by the orchestrator")
	}
	var q protocol.QueueCheckResponse
	err := w.c.doJSON(ctx, w.opt.Timers.RequestTimeout, "queue check", http.MethodGet,
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
	w.log.Error(ErrAuthRejected.Error(), "token", tokenHint(w.opt.Token), "err", err)
	w.stopAndWait(stopFence, "the worker token was rejected")
	return ErrAuthRejected
}

// stopAndWait stops the running job and waits for the tree to be gone (SIGKILL
// comes after the grace, so this is bounded).
func (w *Worker) stopAndWait(why stopReason, detail string) {
	a := w.current()
	if a == nil {
		return
	}
	w.stopJob(a, why, detail, a.grace)
	if a.proc != nil {
		select {
		case <-a.proc.Done():
		case <-time.After(a.grace + 10*time.Second):
			a.log.Error("the job's process tree did not end after SIGKILL")
		}
	}
	rec, report, spooled := w.closeAttempt(a)
	w.release(rec.key())
	if a.ship != nil {
		// A moment for the log's tail; it is in the journal in any case.
		select {
		case <-a.ship.done:
		case <-time.After(min(w.opt.Timers.ShutdownTimeout, 2*time.Second)):
		}
	}
	if report && !spooled {
		ctx, cancel := context.WithTimeout(context.Background(), w.opt.Timers.ShutdownTimeout)
		defer cancel()
		_ = w.sendStatus(ctx, w.opt.Timers.ShutdownTimeout, rec.JobID, rec.Attempt, rec.Status, rec.Error)
		w.reported(rec.key())
	}
}

// finalReportsAndDisconnect sends what is spooled and says goodbye, each bounded by
// ShutdownTimeout; failures are fine (reports stay spooled, the orchestrator
// notices the missing heartbeats).
func (w *Worker) finalReportsAndDisconnect() {
	ctx, cancel := context.WithTimeout(context.Background(), w.opt.Timers.ShutdownTimeout)
	defer cancel()
	if err := w.flushReports(ctx, true); err != nil {
		w.log.Warn("some job reports stay spooled for the next start", "err", err)
	}
	w.mu.Lock()
	id := w.workerID
	w.mu.Unlock()
	if id == "" {
		return
	}
	// No heartbeat may follow the goodbye and make the worker look alive again.
	w.stopHeartbeats()
	err := w.c.doJSON(ctx, w.opt.Timers.ShutdownTimeout, "disconnect", http.MethodPost, "/api/workers/disconnect",
		protocol.DisconnectRequest{WorkerID: id}, nil)
	if err != nil && !errors.Is(err, context.Canceled) {
		w.log.Warn("disconnect failed", "err", err)
		return
	}
	w.log.Info("disconnected from the orchestrator")
}
