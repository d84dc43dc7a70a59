package worker

import (
	"context"
	"errors"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

func (w *Worker) onRegistered(ctx context.Context, s *session, resp protocol.RegisterResponse, sent time.Time) {
	now := time.Now()
	w.mu.Lock()
	w.workerID = resp.WorkerID
	if resp.HeartbeatIntervalSeconds > 0 {
		w.hbInterval = time.Duration(resp.HeartbeatIntervalSeconds * float64(time.Second))
	}
	if resp.PingIntervalSeconds > 0 {
		w.pingInterval = seconds(resp.PingIntervalSeconds)
	}
	interval := w.hbInterval
	adopt := !w.opt.OwnType && resp.WorkerType.Valid() && (resp.WorkerType == protocol.Persistent) != w.persistent
	if adopt {
		w.persistent = resp.WorkerType == protocol.Persistent
	}
	mismatch := w.opt.OwnType && resp.WorkerType.Valid() && (resp.WorkerType == protocol.Persistent) != w.persistent
	w.ackedLocked(sent)
	w.lastProgress = now
	w.mu.Unlock()
	w.registeredOnce.Do(func() { close(w.registered) })
	w.log.Info("registered with the orchestrator", "worker_id", resp.WorkerID, "protocol", resp.Protocol)
	switch {
	case adopt:
		w.log.Info("taking the worker type an admin gave this worker", "worker_type", resp.WorkerType)
	case mismatch:
		w.log.Warn("an admin registered this worker with another type; keeping the one this worker's configuration sets",
			"worker_type", resp.WorkerType, "configured_persistent", w.opt.Persistent)
	}
	s.fence.Reset(fenceTick(w.setFenceLimit(seconds(resp.HeartbeatTimeoutSeconds), interval)))
	w.reconcile(resp)
	select { // self-fenced reports may go now
	case s.kick <- struct{}{}:
	default:
	}
	w.wg.Add(1)
	go w.stream(ctx, s.gen, resp.WorkerID)
}

// errFencedMeanwhile is why a registration that listed an attempt self-fenced
// after it was composed is made again.
var errFencedMeanwhile = errors.New("a job was self-fenced while the registration was on its way; registering again without it")

// settleFences forgets the self-fenced attempts a registration left out, and
// reports whether any is left: one fenced after the registration was composed,
// which listed it as running. The orchestrator then resumed an attempt that is
// being stopped, so the worker must register again without it.
func (w *Worker) settleFences(leftOut []string) (fencedMeanwhile bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, key := range leftOut {
		delete(w.unreconciled, key)
	}
	return len(w.unreconciled) > 0
}

// reconcile applies the registration's verdict on each attempt this worker
// runs. An abandoned attempt is stopped without a report: the orchestrator
// already ended it, and a report could only be refused (409) or, worse, be
// mistaken for news.
func (w *Worker) reconcile(resp protocol.RegisterResponse) {
	for _, a := range w.slots.running() {
		if a.stop == stopFence {
			continue // left out of the registration: it is being stopped
		}
		w.reconcileOne(a, resp)
	}
}

func (w *Worker) reconcileOne(a *runner, resp protocol.RegisterResponse) {
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

func seconds(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }
