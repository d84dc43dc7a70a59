package adminapi

import (
	"context"
	"net/http"

	"github.com/julienschmidt/httprouter"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/authn"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/web"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// The admin and queue API are methods of API: each takes a context
// carrying its Caller and a request of package api, checks the caller's
// scope, and returns a reply of package api or an error. The HTTP routes
// decode into them and encode what they return (httpCall); the dashboard
// calls them directly, with the caller it has authenticated.

// Caller is who calls the API.
type Caller struct {
	auth.Principal
	// IP is where the call came from, for the audit log ("local" on the
	// admin socket).
	IP string
	// BaseURL is the orchestrator's URL as the caller reached it, for the
	// connection commands of new tokens.
	BaseURL string
}

type callerKey struct{}

// WithCaller returns ctx carrying c. The caller must have authenticated c
// (its token, session or socket peer) itself.
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerOf is the Caller of a request r made by p.
func (a *API) CallerOf(r *http.Request, p auth.Principal) Caller {
	return Caller{Principal: p, IP: authn.PeerIP(r), BaseURL: a.baseURL(r)}
}

// authorize returns the caller of ctx when it has scope (scopeAnyCaller:
// any caller): 401 without a caller, 403 without the scope.
func authorize(ctx context.Context, scope string) (Caller, error) {
	c, ok := ctx.Value(callerKey{}).(Caller)
	if !ok {
		return Caller{}, web.Errorf(http.StatusUnauthorized, protocol.CodeUnauthorized, "authentication required")
	}
	if scope != scopeAnyCaller && !c.Has(scope) {
		return Caller{}, web.Errorf(http.StatusForbidden, protocol.CodeForbidden, "this credential lacks the scope %q", scope)
	}
	return c, nil
}

// httpCall serves an API method over HTTP: the request is authenticated
// and its scope checked before parse builds the method's request from the
// path, query and body; the reply is encoded with status.
func httpCall[Req, Resp any](a *API, scope string, status int,
	parse func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) (Req, error),
	method func(context.Context, Req) (Resp, error)) httprouter.Handle {
	return a.admin(scope, func(w http.ResponseWriter, r *http.Request, ps httprouter.Params, p auth.Principal) error {
		req, err := parse(w, r, ps)
		if err != nil {
			return err
		}
		resp, err := method(WithCaller(r.Context(), a.CallerOf(r, p)), req)
		if err != nil {
			return err
		}
		web.WriteJSON(w, status, resp)
		return nil
	})
}

// The parsers of requests that are only a path parameter, a JSON body, or
// nothing.

func workerRef(_ http.ResponseWriter, _ *http.Request, ps httprouter.Params) (api.WorkerRef, error) {
	return api.WorkerRef{ID: ps.ByName("id")}, nil
}

func jobRef(_ http.ResponseWriter, _ *http.Request, ps httprouter.Params) (api.JobRef, error) {
	return api.JobRef{ID: ps.ByName("job_id")}, nil
}

func noRequest(http.ResponseWriter, *http.Request, httprouter.Params) (struct{}, error) {
	return struct{}{}, nil
}

// jsonBody parses a JSON body into a T.
func jsonBody[T any](a *API) func(http.ResponseWriter, *http.Request, httprouter.Params) (T, error) {
	return func(w http.ResponseWriter, r *http.Request, _ httprouter.Params) (T, error) {
		var v T
		err := a.readJSON(w, r, &v)
		return v, err
	}
}

// adminHandler serves an admin request made by p.
type adminHandler func(w http.ResponseWriter, r *http.Request, ps httprouter.Params, p auth.Principal) error

// scopeAnyCaller lets every authenticated admin caller through, whatever its scopes.
const scopeAnyCaller = ""

// admin authenticates an admin credential (or the local socket's peer) and
// checks scope.
func (a *API) admin(scope string, h adminHandler) httprouter.Handle {
	return func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
		p, err := a.auth.Authenticate(w, r)
		if err != nil {
			a.errors.Write(w, r, err)
			return
		}
		if scope != scopeAnyCaller && !p.Has(scope) {
			a.errors.Write(w, r, web.Errorf(http.StatusForbidden, protocol.CodeForbidden, "this credential lacks the scope %q", scope))
			return
		}
		if err := h(w, r, ps, p); err != nil {
			a.errors.Write(w, r, err)
		}
	}
}
