package orchestrator

import (
	"context"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/lifecycle"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/gpuhistory"
)

// runFleetHistory counts the fleet's GPUs once a minute (and at start).
func (s *Server) runFleetHistory(ctx context.Context) {
	every := s.options().fleetHistoryEvery
	if every <= 0 {
		every = gpuhistory.Step
	}
	for {
		s.sampleFleet(ctx)
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}

func (s *Server) sampleFleet(ctx context.Context) {
	groups, err := s.store.SummarizeWorkers(ctx)
	if err != nil {
		return
	}
	gpus, whole, err := s.store.QueuedGPUDemand(ctx)
	if err != nil {
		return
	}
	inUse, online := 0, 0
	for _, g := range groups {
		inUse += g.GPUsUsed
		if lifecycle.Working(g.Status) {
			online += g.Count * g.GPUInfo.Count
		}
	}
	asked := gpus + whole*s.proto.LargestWorker()
	s.gpuHistory.NoteFleet(time.Now(), inUse, asked, online)
}
