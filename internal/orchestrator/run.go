package orchestrator

import (
	"context"
	"fmt"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

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
	loops := []func(context.Context){s.sched.Run, s.proto.RunHealth, s.notify.Listen, s.authn.RunFailureAudit, s.proto.RunStreamCheck,
		s.retention.Run, s.retention.RunSizes, s.runDiskWatch, s.runFleetHistory, s.webhooks.Run}
	done := make(chan struct{}, len(loops))
	for _, loop := range loops {
		go func() { loop(ctx); done <- struct{}{} }()
	}
	for range loops {
		<-done
	}
}
