package orchestrator

import (
	"context"
	"net/http"
	"strings"

	"github.com/julienschmidt/httprouter"

	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/authn"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

type workerHandler func(w http.ResponseWriter, r *http.Request, ps httprouter.Params, wk store.Worker) error

// worker authenticates X-Worker-Token and passes the worker on.
func (s *Server) worker(h workerHandler) httprouter.Handle {
	return func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
		wk, err := s.authn.Worker(r)
		if err != nil {
			s.errs.Write(w, r, err)
			return
		}
		// A registration decides on the session itself (it may take it over).
		if !strings.HasSuffix(r.URL.Path, "/workers/register") {
			if err := s.checkSession(r, wk); err != nil {
				s.errs.Write(w, r, err)
				return
			}
		}
		if err := h(w, r, ps, wk); err != nil {
			s.errs.Write(w, r, err)
		}
	}
}

// WithPrincipal returns ctx carrying p as the authenticated caller of an API
// request that the dashboard constructs and serves through Handler() in
// process (see authn.WithPrincipal).
func WithPrincipal(ctx context.Context, p auth.Principal) context.Context {
	return authn.WithPrincipal(ctx, p)
}
