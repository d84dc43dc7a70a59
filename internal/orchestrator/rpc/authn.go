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
	return s.authWorker(s.Authn.Worker, h)
}

// reportingWorker is worker for the job reports and logs: h gets the part
// of the worker's row that store.GetReportingWorkerByTokenHash reads.
func (s *Protocol) reportingWorker(h workerHandler) httprouter.Handle {
	return s.authWorker(s.Authn.ReportingWorker, h)
}

func (s *Protocol) authWorker(authenticate func(*http.Request) (store.Worker, error), h workerHandler) httprouter.Handle {
	return func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
		wk, err := authenticate(r)
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
