package orchestrator

import (
	"context"
	"time"
)

// flushFailureAudit writes the interval's auth.failure records (package
// authfail gathers them): one per client, at most FailureAuditMaxPeers of
// them, and one more that sums up the clients past that.
func (s *Server) flushFailureAudit(ctx context.Context) {
	for _, rec := range s.failures.Records(s.options().FailureAuditMaxPeers) {
		if err := s.store.AppendAudit(ctx, rec); err != nil {
			s.log.Warn("audit write failed", "action", "auth.failure", "err", err)
			return
		}
	}
}

// runFailureAudit flushes every FailureAuditInterval, and once more when ctx ends.
func (s *Server) runFailureAudit(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			s.flushFailureAudit(bg)
			cancel()
			return
		case <-time.After(s.options().FailureAuditInterval):
			s.flushFailureAudit(ctx)
		}
	}
}
