// Package web is the HTTP plumbing the orchestrator's worker protocol and
// its admin API share: routes, JSON bodies in and out, and the protocol's
// error replies.
package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"path"
	"strings"

	"github.com/julienschmidt/httprouter"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/artifacts"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// Route is one endpoint of the HTTP API. Doc is how docs/protocol.md names
// it ("POST /api/queue/submit") where DocName cannot derive it; a test
// checks every route is documented.
type Route struct {
	Method, Path, Doc string
	Handle            httprouter.Handle
}

// NewRoute is a route; doc is "" where DocName derives the name.
func NewRoute(method, path, doc string, h httprouter.Handle) Route {
	return Route{Method: method, Path: path, Doc: doc, Handle: h}
}

// DocName is how the documentation names a route: METHOD and the path with
// {param} for each :param.
func (r Route) DocName() string {
	if r.Doc != "" {
		return r.Doc
	}
	parts := strings.Split(r.Path, "/")
	for i, p := range parts {
		if name, ok := strings.CutPrefix(p, ":"); ok {
			parts[i] = "{" + name + "}"
		}
	}
	return r.Method + " " + strings.Join(parts, "/")
}

// Errorf is an error reply with status and the protocol's error code.
func Errorf(status int, code, format string, args ...any) *api.Error {
	return &api.Error{Status: status, Body: protocol.ErrorBody{Detail: fmt.Sprintf(format, args...), Error: code}}
}

// Invalid is 422: the request is well-formed but a field is wrong.
func Invalid(format string, args ...any) *api.Error {
	return Errorf(http.StatusUnprocessableEntity, protocol.CodeInvalidRequest, format, args...)
}

// NotFound is 404.
func NotFound(format string, args ...any) *api.Error {
	return Errorf(http.StatusNotFound, protocol.CodeNotFound, format, args...)
}

// Conflict is 409.
func Conflict(format string, args ...any) *api.Error {
	return Errorf(http.StatusConflict, protocol.CodeConflict, format, args...)
}

// StaleAttempt is 409 telling a worker to kill an attempt that is no
// longer the job's current one.
func StaleAttempt(format string, args ...any) *api.Error {
	e := Errorf(http.StatusConflict, protocol.CodeStaleAttempt, format, args...)
	e.Body.Action = "kill"
	return e
}

// WriteJSON answers v as JSON with status; replies are never cached.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// ReadJSON reads a JSON object body of at most limit bytes into v and
// returns the body: malformed → 400, over the limit → 413, wrong field types
// → 422 naming the field. Unknown fields are ignored, as upstream's agent
// and clients send extras.
func ReadJSON(w http.ResponseWriter, r *http.Request, limit int64, v any) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, Errorf(http.StatusRequestEntityTooLarge, protocol.CodeTooLarge, "request body exceeds %d bytes", mbe.Limit)
		}
		return nil, Errorf(http.StatusBadRequest, protocol.CodeInvalidJSON, "could not read the request body: %v", err)
	}
	return body, DecodeBody(body, v)
}

// DecodeBody decodes a JSON object body into v, with ReadJSON's errors.
func DecodeBody(body []byte, v any) error {
	trimmed := strings.TrimSpace(string(body))
	if trimmed == "" {
		return Errorf(http.StatusBadRequest, protocol.CodeInvalidJSON, "request body is empty; a JSON object is required")
	}
	if !strings.HasPrefix(trimmed, "{") {
		if json.Valid(body) {
			return Invalid("request body must be a JSON object")
		}
		return Errorf(http.StatusBadRequest, protocol.CodeInvalidJSON, "request body is not valid JSON")
	}
	if err := json.Unmarshal(body, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			field := te.Field
			if field == "" {
				field = "body"
			}
			return Invalid("field %q must be %s, not a JSON %s", field, jsonKind(te.Type.String()), te.Value)
		}
		return Errorf(http.StatusBadRequest, protocol.CodeInvalidJSON, "request body is not valid JSON: %v", err)
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

// ArtifactError is the reply to a failure of the artifact store: the
// refusals it names (too large, a bad name, a conflict, an unsafe path) and
// the store being unreachable, which the log details. Other errors pass
// through.
func ArtifactError(log *slog.Logger, err error) error {
	var tl *artifacts.TooLargeError
	var re *artifacts.ReserveError
	switch {
	case errors.As(err, &re):
		return Errorf(http.StatusInsufficientStorage, protocol.CodeInsufficientStorage, "%s; nothing was stored", re.Error())
	case errors.As(err, &tl):
		return Errorf(http.StatusRequestEntityTooLarge, protocol.CodeTooLarge, "%s; nothing was stored", tl.Error())
	case errors.Is(err, artifacts.ErrInvalidName):
		return Errorf(http.StatusBadRequest, protocol.CodeInvalidRequest, "Invalid bucket or key: %v", err)
	case errors.Is(err, artifacts.ErrNotFound):
		return NotFound("Object not found")
	case errors.Is(err, artifacts.ErrConflict):
		return Conflict("%v", err)
	case errors.Is(err, artifacts.ErrUnsafePath):
		log.Warn("artifact path refused", "err", err)
		return Errorf(http.StatusForbidden, protocol.CodeForbidden, "%v", err)
	case errors.Is(err, artifacts.ErrUnavailable):
		// Not the database: say which store failed, the detail stays in the log.
		log.Warn("the artifact store is unreachable", "err", err)
		return Errorf(http.StatusServiceUnavailable, protocol.CodeUnavailable,
			"the artifact store is unreachable; nothing was changed, try again shortly")
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, context.Canceled) || isBodyReadError(err):
		return Errorf(http.StatusBadRequest, protocol.CodeInvalidRequest, "the upload was interrupted (%v); nothing was stored", err)
	}
	return err
}

// isBodyReadError tells a broken request body (the client went away) from
// a failure of the storage.
func isBodyReadError(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "reading the upload") || strings.Contains(msg, "http: request body too large") ||
		strings.Contains(msg, "connection reset") || strings.Contains(msg, "unexpected EOF")
}

// Printable refuses a text field that holds control characters (see
// protocol.CheckPrintable).
func Printable(field, v string) error {
	if err := protocol.CheckPrintable(v); err != nil {
		return Invalid("field %q %v", field, err)
	}
	return nil
}

// ServeArtifact answers GET and HEAD, whole or by Range. Artifacts are
// served as opaque downloads: never sniffed or rendered, so an uploaded HTML
// file cannot run as a page of the orchestrator's origin.
func ServeArtifact(w http.ResponseWriter, r *http.Request, rd io.ReadSeeker, obj artifacts.Object) {
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(obj.Path)}))
	h.Set("Cache-Control", "private, no-cache")
	if et := obj.ETag(); et != "" {
		h.Set("ETag", et)
	}
	if obj.SHA256 != "" {
		h.Set(api.ArtifactSHA256Header, obj.SHA256)
	}
	http.ServeContent(w, r, "", obj.Modified, rd)
}
