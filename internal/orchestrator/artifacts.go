package orchestrator

import "github.com/simpletuner/simpletuner-orchestration/internal/artifacts"

// SetArtifacts gives the server its artifact storage; without it the
// artifact endpoints answer 503.
func (s *Server) SetArtifacts(a *artifacts.Store) {
	s.artifacts.Store(a)
	s.applyArtifactLimits(s.options())
}

func (s *Server) applyArtifactLimits(o Options) {
	if a := s.artifacts.Load(); a != nil {
		a.SetLimits(artifacts.Limits{MaxObjectBytes: o.ArtifactMaxObjectBytes, MaxJobBytes: o.ArtifactMaxJobBytes,
			MaxJobObjects: o.ArtifactMaxJobObjects, ReservePercent: o.ArtifactReservePercent})
	}
}
