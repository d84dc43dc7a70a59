package rpc

import (
	"context"
	"fmt"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/liveness"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// RunHealth marks silent workers offline (their attempts end worker_lost) and
// deletes long-offline ephemeral workers.
func (s *Protocol) RunHealth(ctx context.Context) {
	for {
		s.healthPass(ctx)
		select {
		case <-ctx.Done():
			return
		case <-time.After(s.Options().HealthCheckInterval):
		}
	}
}

func (s *Protocol) healthPass(ctx context.Context) {
	if s.Stopping() {
		// Heartbeats can no longer arrive: silence now means nothing.
		return
	}
	opt := s.Options()
	now := time.Now().UTC()
	rules := liveness.Rules{
		HeartbeatTimeout:      opt.HeartbeatTimeout,
		EphemeralCleanupAfter: opt.EphemeralCleanupAfter,
		InStartupGrace:        time.Since(s.Started) < opt.StartupGrace,
	}
	var stale, expired []store.Worker
	largest := 0
	err := store.EachWorker(ctx, s.Store, func(w store.Worker) {
		largest = max(largest, w.GPUInfo.Count)
		// A heartbeat the full disk kept from the store counts too.
		w.LastHeartbeat = s.Heard.LastBeat(w.ID, w.LastHeartbeat)
		switch liveness.Judge(w, now, rules) {
		case liveness.Silent:
			stale = append(stale, w)
		case liveness.Expired:
			expired = append(expired, w)
		}
	})
	s.NoteStore(err)
	if err != nil {
		s.Log.Warn("health check could not list workers", "err", err)
		return
	}
	s.largestWorker.Store(int64(largest))
	for _, w := range stale {
		why := fmt.Sprintf("no heartbeat for %s", now.Sub(*w.LastHeartbeat).Round(time.Second))
		if err := s.markOffline(ctx, w.ID, "system", "", why); err != nil {
			s.Log.Warn("could not mark worker offline", "worker_id", w.ID, "err", err)
		}
	}
	for _, w := range expired {
		rec := audit.New("system", "", "worker.delete", "worker", w.ID, audit.Success,
			map[string]string{"name": w.Name, "reason": "ephemeral worker offline for longer than " + opt.EphemeralCleanupAfter.String()})
		if err := s.Store.DeleteWorker(ctx, w.ID, &rec); err != nil {
			s.Log.Warn("could not delete expired ephemeral worker", "worker_id", w.ID, "err", err)
			continue
		}
		s.Log.Info("deleted offline ephemeral worker", "worker_id", w.ID, "name", w.Name)
	}
}
