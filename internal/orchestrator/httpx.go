package orchestrator

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/diskfull"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// apiError is an HTTP error with the protocol's JSON error body.
type apiError = api.Error

func errorf(status int, code, format string, args ...any) *apiError {
	return &apiError{Status: status, Body: protocol.ErrorBody{Detail: fmt.Sprintf(format, args...), Error: code}}
}

func invalid(format string, args ...any) *apiError {
	return errorf(http.StatusUnprocessableEntity, protocol.CodeInvalidRequest, format, args...)
}

func notFound(format string, args ...any) *apiError {
	return errorf(http.StatusNotFound, protocol.CodeNotFound, format, args...)
}

func conflict(format string, args ...any) *apiError {
	return errorf(http.StatusConflict, protocol.CodeConflict, format, args...)
}

func staleAttempt(format string, args ...any) *apiError {
	e := errorf(http.StatusConflict, protocol.CodeStaleAttempt, format, args...)
	e.Body.Action = "kill"
	return e
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers err, as APIError says.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	ae, retryAfter := s.apiError(err, r.Method+" "+r.URL.Path)
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	if ae.Body.RequestID != "" {
		w.Header().Set("X-Request-ID", ae.Body.RequestID)
	}
	writeJSON(w, ae.Status, ae.Body)
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
		ae = errorf(http.StatusServiceUnavailable, protocol.CodeUnavailable, "the database is unreachable; try again shortly")
		retryAfter = "5"
	} else {
		s.log.Error("request failed", "call", what, "request_id", id, "err", err)
		ae = errorf(http.StatusInternalServerError, protocol.CodeInternal, "internal error (request id %s); the orchestrator's log has the details", id)
	}
	ae.Body.RequestID = id
	return ae, retryAfter
}

// decodeJSON reads a JSON object body into v: malformed → 400, over the size
// limit → 413, wrong field types → 422 naming the field. Unknown fields are
// ignored, as upstream's agent and clients send extras.
func (s *Server) decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	_, err := s.decodeJSONBody(w, r, v)
	return err
}

// decodeJSONBody is decodeJSON that also returns the body it read.
func (s *Server) decodeJSONBody(w http.ResponseWriter, r *http.Request, v any) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.options().MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, errorf(http.StatusRequestEntityTooLarge, protocol.CodeTooLarge, "request body exceeds %d bytes", mbe.Limit)
		}
		return nil, errorf(http.StatusBadRequest, protocol.CodeInvalidJSON, "could not read the request body: %v", err)
	}
	return body, decodeBody(body, v)
}

func decodeBody(body []byte, v any) error {
	trimmed := strings.TrimSpace(string(body))
	if trimmed == "" {
		return errorf(http.StatusBadRequest, protocol.CodeInvalidJSON, "request body is empty; a JSON object is required")
	}
	if !strings.HasPrefix(trimmed, "{") {
		if json.Valid(body) {
			return invalid("request body must be a JSON object")
		}
		return errorf(http.StatusBadRequest, protocol.CodeInvalidJSON, "request body is not valid JSON")
	}
	if err := json.Unmarshal(body, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			field := te.Field
			if field == "" {
				field = "body"
			}
			return invalid("field %q must be %s, not a JSON %s", field, jsonKind(te.Type.String()), te.Value)
		}
		return errorf(http.StatusBadRequest, protocol.CodeInvalidJSON, "request body is not valid JSON: %v", err)
	}
	return nil
}

func jsonKind(goType string) string {
	switch {
	case strings.HasPrefix(goType, "map["):
		return "an object"
	case strings.HasPrefix(goType, "[]"):
		return "an array"
	case goType == "string" || strings.HasSuffix(goType, "Status") || strings.HasSuffix(goType, "Target") || strings.HasSuffix(goType, "Type"):
		return "a string"
	case goType == "bool":
		return "a boolean"
	case strings.HasPrefix(goType, "int") || strings.HasPrefix(goType, "float") || strings.HasPrefix(goType, "uint"):
		return "a number"
	}
	return "of type " + goType
}
