package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/web"
	"github.com/simpletuner/simpletuner-orchestration/internal/version"
)

// The probes of the orchestrator's health: /healthz and /readyz for
// load balancers, Healthy for the systemd watchdog.

// Healthy is the watchdog gate: the store answered recently and the scheduler
// loop is turning.
func (s *Server) Healthy() error {
	if p := s.storeErr.Load(); p != nil && *p != nil {
		return *p
	}
	last := s.sched.LastPass()
	if limit := 3*s.options().SchedulerInterval + 10*time.Second; time.Since(last) > limit {
		return errors.New("scheduler loop has not completed a pass for " + time.Since(last).Round(time.Second).String())
	}
	return nil
}

// healthz answers while the process serves, with the version it runs and
// the kind of store it uses (neither names a host, a path or a driver).
func (s *Server) healthz(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	web.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok", "version": version.Version, "store": s.store.Kind()})
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	if s.stopping.Load() {
		web.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "reason": "shutting down"})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	// Anyone may ask: the answer names no host, port or driver message. The
	// log has the error, once each time readiness is lost. A database that
	// went silent may hold the ping past the deadline (until the store's own
	// timeout breaks the connection): the answer does not wait for it.
	pinged := make(chan error, 1)
	go func() { pinged <- s.store.Ping(ctx) }()
	var err error
	select {
	case err = <-pinged:
	case <-ctx.Done():
		err = fmt.Errorf("no answer within 2s: %w", ctx.Err())
	}
	if err != nil {
		if !s.unready.Swap(true) {
			s.log.Warn("not ready: the database does not answer", "err", err)
		}
		web.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "reason": "database unreachable"})
		return
	}
	if s.unready.Swap(false) {
		s.log.Info("ready: the database answers again")
	}
	notReady, degraded := s.disk.Problem()
	if notReady != "" {
		web.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "reason": notReady})
		return
	}
	if degraded != "" {
		web.WriteJSON(w, http.StatusOK, map[string]string{"status": "ready", "degraded": degraded})
		return
	}
	web.WriteJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// noteStore remembers whether the last store call worked (watchdog gate).
func (s *Server) noteStore(err error) {
	if err != nil && web.IsUnavailable(err) {
		s.storeErr.Store(&err)
		return
	}
	s.storeErr.Store(nil)
}
