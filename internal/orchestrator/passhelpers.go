package orchestrator

import (
	"context"
	"slices"

	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/placement"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/web"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// noteStore remembers whether the last store call worked (watchdog gate).
func (s *Server) noteStore(err error) {
	if err != nil && web.IsUnavailable(err) {
		s.storeErr.Store(&err)
		return
	}
	s.storeErr.Store(nil)
}

// hasJobForScan is how many queued jobs, from the head, hasJobFor looks at.
const hasJobForScan = 500

// hasJobFor reports whether a queued job could run on the worker (the
// ephemeral worker's question before it leaves).
func (s *Server) hasJobFor(ctx context.Context, wk store.Worker) (bool, error) {
	jobs, err := s.store.ListQueued(ctx, nil, hasJobForScan)
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(jobs, func(j store.QueuedJob) bool { return placement.Matches(j, wk) }), nil
}
