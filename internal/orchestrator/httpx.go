package orchestrator

import (
	"net/http"

	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/web"
)

// decodeJSON reads a JSON object body into v (web.ReadJSON, within the
// configured body limit).
func (s *Server) decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	_, err := web.ReadJSON(w, r, s.options().MaxBodyBytes, v)
	return err
}
