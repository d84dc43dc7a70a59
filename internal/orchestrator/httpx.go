package orchestrator

import (
	"errors"
	"math"
	"net/http"
	"strconv"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/diskfull"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/web"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// writeError answers err, as APIError says.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	ae, retryAfter := s.apiError(err, r.Method+" "+r.URL.Path)
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	if ae.Body.RequestID != "" {
		w.Header().Set("X-Request-ID", ae.Body.RequestID)
	}
	web.WriteJSON(w, ae.Status, ae.Body)
}

// APIError is what a call of the API that failed with err answers, for a
// caller in process (the dashboard) as for HTTP. An *api.Error says it
// itself; a full disk is 507 (see diskfull.go); anything else is either the
// database being out of reach (503, worth a retry) or a fault of ours (500).
// Neither shows the error itself, which may name hosts, paths or driver
// internals: the log has it, under a request id the reply names. what
// names the call in that log line.
func (s *Server) APIError(err error, what string) *api.Error {
	ae, _ := s.apiError(err, what)
	return ae
}

func (s *Server) apiError(err error, what string) (ae *api.Error, retryAfter string) {
	if ae = api.ErrorOf(err); ae != nil {
		if ae.RetryAfter > 0 {
			retryAfter = strconv.Itoa(int(math.Ceil(ae.RetryAfter.Seconds())))
		}
		return ae, retryAfter
	}
	if diskfull.IsNoSpace(err) {
		// Logged once for the whole episode, not per request.
		disk := diskfull.Artifacts
		if errors.Is(err, store.ErrDiskFull) {
			disk = diskfull.Database
		}
		return s.diskFullError(disk, err), "30"
	}
	id := protocol.NewRequestID()
	if isUnavailable(err) {
		s.log.Warn("request failed: database unreachable", "call", what, "request_id", id, "err", err)
		ae = web.Errorf(http.StatusServiceUnavailable, protocol.CodeUnavailable, "the database is unreachable; try again shortly")
		retryAfter = "5"
	} else {
		s.log.Error("request failed", "call", what, "request_id", id, "err", err)
		ae = web.Errorf(http.StatusInternalServerError, protocol.CodeInternal, "internal error (request id %s); the orchestrator's log has the details", id)
	}
	ae.Body.RequestID = id
	return ae, retryAfter
}

// decodeJSON reads a JSON object body into v (web.ReadJSON, within the
// configured body limit).
func (s *Server) decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	_, err := web.ReadJSON(w, r, s.options().MaxBodyBytes, v)
	return err
}
