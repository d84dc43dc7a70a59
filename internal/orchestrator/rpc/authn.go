package rpc

import (
	"net/http"
	"strings"

	"github.com/julienschmidt/httprouter"

	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

type workerHandler func(w http.ResponseWriter, r *http.Request, ps httprouter.Params, wk store.Worker) error

// worker authenticates X-Worker-Token and passes the worker on.
func (s *Protocol) worker(h workerHandler) httprouter.Handle {
	return func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
		wk, err := s.Authn.Worker(r)
		if err != nil {
			s.Errors.Write(w, r, err)
			return
		}
		// A registration decides on the session itself (it may take it over).
		if !strings.HasSuffix(r.URL.Path, "/workers/register") {
			if err := s.checkSession(r, wk); err != nil {
				s.Errors.Write(w, r, err)
				return
			}
		}
		if err := h(w, r, ps, wk); err != nil {
			s.Errors.Write(w, r, err)
		}
	}
}
