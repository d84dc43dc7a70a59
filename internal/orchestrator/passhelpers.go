package orchestrator

import (
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/web"
)

// noteStore remembers whether the last store call worked (watchdog gate).
func (s *Server) noteStore(err error) {
	if err != nil && web.IsUnavailable(err) {
		s.storeErr.Store(&err)
		return
	}
	s.storeErr.Store(nil)
}
