package rpc

import (
	"context"
	"slices"

	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/placement"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// hasJobForScan is how many queued jobs, from the head, hasJobFor looks at.
const hasJobForScan = 500

// hasJobFor reports whether a queued job could run on the worker (the
// ephemeral worker's question before it leaves).
func (s *Protocol) hasJobFor(ctx context.Context, wk store.Worker) (bool, error) {
	jobs, err := s.Store.ListQueued(ctx, nil, hasJobForScan)
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(jobs, func(j store.QueuedJob) bool { return placement.Matches(j, wk) }), nil
}
