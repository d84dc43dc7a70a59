package orchestrator

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"path"
	"slices"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/lifecycle"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// matches reports whether worker w may run job j: target, GPU count, VRAM and
// every label glob.
func matches(j store.Job, w store.Worker) bool {
	switch j.Target {
	case protocol.TargetWorker:
		if w.Local {
			return false
		}
	case protocol.TargetLocal:
		if !w.Local {
			return false
		}
	}
	g := parseGPUInfo(w.GPUInfo)
	if j.GPUCount > 0 && g.Count < j.GPUCount {
		return false
	}
	if j.MinVRAMGB > 0 && g.VRAMGB < j.MinVRAMGB {
		return false
	}
	for key, glob := range j.WorkerLabels {
		v, ok := w.Labels[key]
		if !ok {
			return false
		}
		if m, err := path.Match(glob, v); err != nil || !m {
			return false
		}
	}
	return true
}

// runScheduler claims and dispatches jobs whenever woken and on every tick; the
// tick is the guarantee, wake-ups only make it prompt.
func (s *Server) runScheduler(ctx context.Context) {
	var lastExpiry time.Time
	for {
		s.schedulePass(ctx)
		// Deadlines are seconds apart; wake-ups come with every submit and
		// every finished job, so scanning active jobs on each would be waste.
		if every := min(s.options().SchedulerInterval, time.Second); time.Since(lastExpiry) >= every {
			s.expireDeadlines(ctx)
			lastExpiry = time.Now()
		}
		s.lastTick.Store(time.Now().UnixNano())
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		case <-time.After(s.options().SchedulerInterval):
		}
	}
}

// schedulePass offers queued jobs to the idle workers streaming to this
// instance: remote workers first, so "auto" jobs prefer them over local ones.
//
// A pass ends once as many claims succeeded as jobs were queued when it
// began: a job queued or requeued later wakes the scheduler for another pass.
// Workers are read one at a time as they are offered a job, so one queued job
// costs a read or two however many idle workers are connected, and when the
// whole queue is at hand a worker none of its jobs matches is not offered one.
func (s *Server) schedulePass(ctx context.Context) {
	s.passMu.Lock()
	defer s.passMu.Unlock()
	if s.stopping.Load() {
		return
	}
	queued, total, err := s.store.ListJobs(ctx, store.JobFilter{Statuses: []protocol.JobStatus{protocol.JobQueued}, Limit: passSnapshot})
	s.noteStore(err)
	if err != nil || len(queued) == 0 || total == 0 {
		return
	}
	complete := len(queued) == total
	remaining := total
	// offer claims for w; false ends the pass.
	offer := func(w store.Worker) bool {
		if complete && !slices.ContainsFunc(queued, func(j store.Job) bool { return matches(j, w) }) {
			return true
		}
		if err := s.claimFor(ctx, w); errors.Is(err, store.ErrNoJob) || errors.Is(err, store.ErrConflict) {
			return true
		} else if err != nil {
			if !s.logDiskFullOnce(err) {
				s.log.Warn("claim failed", "worker_id", w.ID, "err", err)
			}
			return false
		}
		remaining--
		return remaining > 0
	}
	var locals []store.Worker
	for _, id := range s.hub.ConnectedIDs() {
		if ctx.Err() != nil {
			return
		}
		w, err := s.store.GetWorker(ctx, id)
		if err != nil || !lifecycle.CanClaim(w.Status, running(w), 1) {
			continue
		}
		if w.Local {
			locals = append(locals, w)
			continue
		}
		if !offer(w) {
			return
		}
	}
	for _, w := range locals {
		if ctx.Err() != nil || !offer(w) {
			return
		}
	}
}

// passSnapshot is how many queued jobs a pass reads up front to skip workers
// that none of them matches; with more queued, every idle worker tries a claim.
const passSnapshot = 32

// claimFor claims the best job for one worker and sends it on the stream. If
// the stream vanished in between, the attempt is withdrawn at once.
func (s *Server) claimFor(ctx context.Context, w store.Worker) error {
	opt := s.options()
	uploadToken := newUploadToken()
	now := time.Now().UTC()
	rec := audit.New("system", "", "job.dispatch", "worker", w.ID, audit.Success, nil)
	j, a, err := s.store.ClaimJob(ctx, store.ClaimRequest{
		WorkerID:        w.ID,
		Match:           func(j store.Job) bool { return matches(j, w) },
		UploadTokenHash: auth.Hash(uploadToken),
		AckDeadline:     now.Add(opt.AckTimeout),
		Now:             now,
		Audit:           &rec,
	})
	if err != nil {
		return err
	}
	ev := protocol.JobSubmitEvent{
		Type: protocol.EventJobSubmit, JobID: j.ID, Config: j.Config, Dataloader: j.Dataloader,
		Provider: "worker", UploadEndpoint: "/api/cloud/storage", UploadToken: uploadToken, HFToken: j.HFToken,
		Attempt: a.Number, ConfigName: j.ConfigName, TimeoutSeconds: float64(j.TimeoutSeconds),
		CancelGraceSeconds: opt.CancelGrace.Seconds(), LogEndpoint: "/api/workers/job/" + j.ID + "/logs",
	}
	if !s.hub.Send(w.ID, protocol.EventJobSubmit, ev) {
		s.log.Warn("worker stream vanished during dispatch; withdrawing", "job_id", j.ID, "worker_id", w.ID)
		_ = s.loseAttempt(ctx, j.ID, w.ID, "the worker's stream closed during dispatch")
		return nil
	}
	s.metrics.Dispatches.Add(1)
	if a.Number == 1 {
		s.metrics.ObserveDispatch(now.Sub(j.CreatedAt))
	}
	s.log.Info("job dispatched", "job_id", j.ID, "attempt", a.Number, "worker_id", w.ID, "priority", j.Priority)
	return nil
}

func newUploadToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return "stu_" + base64.RawURLEncoding.EncodeToString(b)
}

// noteStore remembers whether the last store call worked (watchdog gate).
func (s *Server) noteStore(err error) {
	if err != nil && isUnavailable(err) {
		s.storeErr.Store(&err)
		return
	}
	s.storeErr.Store(nil)
}

// hasJobFor reports whether a queued job could run on the worker (the
// ephemeral worker's question before it leaves).
func (s *Server) hasJobFor(ctx context.Context, wk store.Worker) (bool, error) {
	jobs, _, err := s.store.ListJobs(ctx, store.JobFilter{Statuses: []protocol.JobStatus{protocol.JobQueued}, Limit: store.ClaimScanLimit})
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(jobs, func(j store.Job) bool { return matches(j, wk) }), nil
}
