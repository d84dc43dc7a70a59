package rpc

import (
	"net/http"

	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/web"
)

// decodeJSON reads a JSON object body into v (web.ReadJSON, within the
// configured body limit).
func (s *Protocol) decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	_, err := web.ReadJSON(w, r, s.Options().MaxBodyBytes, v)
	return err
}
