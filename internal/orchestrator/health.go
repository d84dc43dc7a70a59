package orchestrator

import (
	"context"
	"fmt"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/liveness"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// runHealth marks silent workers offline (their attempts end worker_lost) and
// deletes long-offline ephemeral workers.
func (s *Server) runHealth(ctx context.Context) {
	for {
		s.healthPass(ctx)
		select {
		case <-ctx.Done():
			return
		case <-time.After(s.options().HealthCheckInterval):
		}
	}
}

func (s *Server) healthPass(ctx context.Context) {
	if s.stopping.Load() {
		// Heartbeats can no longer arrive: silence now means nothing.
		return
	}
	opt := s.options()
	now := time.Now().UTC()
	rules := liveness.Rules{
		HeartbeatTimeout:      opt.HeartbeatTimeout,
		EphemeralCleanupAfter: opt.EphemeralCleanupAfter,
		InStartupGrace:        time.Since(s.started) < opt.StartupGrace,
	}
	var stale, expired []store.Worker
	largest := 0
	err := store.EachWorker(ctx, s.store, func(w store.Worker) {
		largest = max(largest, w.GPUInfo.Count)
		// A heartbeat the full disk kept from the store counts too.
		w.LastHeartbeat = s.heard.LastBeat(w.ID, w.LastHeartbeat)
		switch liveness.Judge(w, now, rules) {
		case liveness.Silent:
			stale = append(stale, w)
		case liveness.Expired:
			expired = append(expired, w)
		}
	})
	s.noteStore(err)
	if err != nil {
		s.log.Warn("health check could not list workers", "err", err)
		return
	}
	s.largestWorker.Store(int64(largest))
	for _, w := range stale {
		why := fmt.Sprintf("no heartbeat for %s", now.Sub(*w.LastHeartbeat).Round(time.Second))
		if err := s.markOffline(ctx, w.ID, "system", "", why); err != nil {
			s.log.Warn("could not mark worker offline", "worker_id", w.ID, "err", err)
		}
	}
	for _, w := range expired {
		rec := audit.New("system", "", "worker.delete", "worker", w.ID, audit.Success,
			map[string]string{"name": w.Name, "reason": "ephemeral worker offline for longer than " + opt.EphemeralCleanupAfter.String()})
		if err := s.store.DeleteWorker(ctx, w.ID, &rec); err != nil {
			s.log.Warn("could not delete expired ephemeral worker", "worker_id", w.ID, "err", err)
			continue
		}
		s.log.Info("deleted offline ephemeral worker", "worker_id", w.ID, "name", w.Name)
	}
}

// Status is the one-line summary for systemd's STATUS=.
func (s *Server) Status(ctx context.Context) string {
	counts, err := s.store.CountJobs(ctx)
	if err != nil {
		return "database unreachable: " + err.Error()
	}
	running := counts[protocol.JobDispatched] + counts[protocol.JobRunning] + counts[protocol.JobCanceling]
	return fmt.Sprintf("%d workers online, %d queued, %d running", s.hub.Count(), counts[protocol.JobQueued], running)
}

// Run starts the background loops and blocks until ctx ends.
func (s *Server) Run(ctx context.Context) {
	loops := []func(context.Context){s.sched.Run, s.runHealth, s.notify.Listen, s.authn.RunFailureAudit, s.runStreamCheck,
		s.retention.Run, s.retention.RunSizes, s.runDiskWatch, s.runFleetHistory, s.webhooks.Run}
	done := make(chan struct{}, len(loops))
	for _, loop := range loops {
		go func() { loop(ctx); done <- struct{}{} }()
	}
	for range loops {
		<-done
	}
}
