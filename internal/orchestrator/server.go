// Package orchestrator is simpletuner-orchestratord's core: the HTTP API
// (worker, admin and queue endpoints), the SSE hub that delivers events to
// workers, the scheduler that claims jobs for idle workers, and the health loop.
// State lives behind store.Store; this package never speaks SQL.
package orchestrator

import (
	"context"
	"database/sql/driver"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// Options are the orchestrator's settings, filled from the config by main.
type Options struct {
	InstanceID            string
	MaxBodyBytes          int64
	AdminGroup            string
	ConfigsDir            string
	HeartbeatInterval     time.Duration
	HeartbeatTimeout      time.Duration
	HealthCheckInterval   time.Duration
	StartupGrace          time.Duration
	AckTimeout            time.Duration
	EphemeralCleanupAfter time.Duration
	PingInterval          time.Duration
	SchedulerInterval     time.Duration
	MaxRetries            int
	CancelGrace           time.Duration
	CancelReportTimeout   time.Duration
	LogLimitBytes         int64
	AuthFailuresPerMinute int
}

// DefaultOptions are the documentation's timers and limits.
func DefaultOptions() Options {
	host, _ := os.Hostname()
	return Options{
		InstanceID:            host,
		MaxBodyBytes:          1 << 20,
		AdminGroup:            "simpletuner-admin",
		ConfigsDir:            "/etc/simpletuner/configs",
		HeartbeatInterval:     30 * time.Second,
		HeartbeatTimeout:      120 * time.Second,
		HealthCheckInterval:   60 * time.Second,
		StartupGrace:          120 * time.Second,
		AckTimeout:            60 * time.Second,
		EphemeralCleanupAfter: time.Hour,
		PingInterval:          15 * time.Second,
		SchedulerInterval:     5 * time.Second,
		MaxRetries:            3,
		CancelGrace:           30 * time.Second,
		CancelReportTimeout:   30 * time.Second,
		LogLimitBytes:         256 << 20,
		AuthFailuresPerMinute: 10,
	}
}

// Server holds the orchestrator's live state. Create it with New, then serve
// Handler() on the API listeners and AdminHandler() on the admin socket, and run
// Run for the background loops.
type Server struct {
	store    store.Store
	log      *slog.Logger
	hub      *Hub
	metrics  *Metrics
	limiter  *auth.FailureLimiter
	started  time.Time
	wake     chan struct{}
	optMu    sync.RWMutex
	opt      Options
	stopping atomic.Bool
	// lastTick is when the scheduler last finished a pass (unix nanos); the
	// watchdog and /readyz look at it.
	lastTick atomic.Int64
	storeErr atomic.Pointer[error]
	// adminSocketPath names the unix socket in connection commands given over it.
	adminSocketPath string
	// telemetry holds each worker's latest GPU numbers from its heartbeats.
	telemetry *telemetryMap
}

// SetAdminSocketPath tells the server where its admin socket lives.
func (s *Server) SetAdminSocketPath(p string) { s.adminSocketPath = p }

// New builds a Server on an open store.
func New(st store.Store, opt Options, log *slog.Logger) *Server {
	s := &Server{
		store:     st,
		log:       log,
		metrics:   NewMetrics(),
		started:   time.Now(),
		wake:      make(chan struct{}, 1),
		opt:       opt,
		limiter:   auth.NewFailureLimiter(opt.AuthFailuresPerMinute, time.Now),
		telemetry: newTelemetryMap(),
	}
	s.hub = NewHub(s.metrics, log)
	s.lastTick.Store(time.Now().UnixNano())
	return s
}

// options returns the current settings (SIGHUP may replace them).
func (s *Server) options() Options {
	s.optMu.RLock()
	defer s.optMu.RUnlock()
	return s.opt
}

// SetOptions applies settings that can change without a restart.
func (s *Server) SetOptions(o Options) {
	s.optMu.Lock()
	s.opt = o
	s.optMu.Unlock()
	s.Wake()
}

// Hub exposes the SSE hub (tests and metrics).
func (s *Server) Hub() *Hub { return s.hub }

// Wake asks the scheduler for a pass soon; it never blocks.
func (s *Server) Wake() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Healthy is the watchdog gate: the store answered recently and the scheduler
// loop is turning.
func (s *Server) Healthy() error {
	if p := s.storeErr.Load(); p != nil && *p != nil {
		return *p
	}
	last := time.Unix(0, s.lastTick.Load())
	if limit := 3*s.options().SchedulerInterval + 10*time.Second; time.Since(last) > limit {
		return errors.New("scheduler loop has not completed a pass for " + time.Since(last).Round(time.Second).String())
	}
	return nil
}

// BeginShutdown makes /readyz answer 503 and closes every worker stream.
func (s *Server) BeginShutdown() {
	s.stopping.Store(true)
	s.hub.CloseAll()
}

type ctxKey int

const peerKey ctxKey = 1

// localPeer is what the admin unix socket learned about its client.
type localPeer struct {
	uid     uint32
	allowed bool
}

// AdminConnContext records the peer credentials of an admin-socket connection;
// use it as http.Server.ConnContext for that listener.
func (s *Server) AdminConnContext(ctx context.Context, c net.Conn) context.Context {
	uid, _, _, err := auth.PeerCred(c)
	if err != nil {
		s.log.Warn("admin socket: cannot read peer credentials", "err", err)
		return context.WithValue(ctx, peerKey, localPeer{uid: ^uint32(0)})
	}
	ok, err := auth.InGroup(uid, s.options().AdminGroup)
	if err != nil {
		s.log.Warn("admin socket: group lookup failed", "uid", uid, "err", err)
	}
	return context.WithValue(ctx, peerKey, localPeer{uid: uid, allowed: ok})
}

func peerOf(r *http.Request) (localPeer, bool) {
	p, ok := r.Context().Value(peerKey).(localPeer)
	return p, ok
}

// Handler is the HTTP API served on every listener.
func (s *Server) Handler() http.Handler {
	r := httprouter.New()
	r.HandleMethodNotAllowed = true
	r.NotFound = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		s.writeError(w, req, notFound("no such endpoint: %s %s", req.Method, req.URL.Path))
	})
	r.MethodNotAllowed = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		s.writeError(w, req, errorf(http.StatusMethodNotAllowed, "method_not_allowed", "%s is not allowed on %s", req.Method, req.URL.Path))
	})
	r.PanicHandler = func(w http.ResponseWriter, req *http.Request, v any) {
		s.log.Error("handler panic", "path", req.URL.Path, "panic", v)
		s.writeError(w, req, errors.New("panic"))
	}

	r.GET("/healthz", s.healthz)
	r.GET("/readyz", s.readyz)

	// Worker protocol.
	r.POST("/api/workers/register", s.worker(s.register))
	r.GET("/api/workers/stream", s.worker(s.stream))
	r.POST("/api/workers/heartbeat", s.worker(s.heartbeat))
	r.POST("/api/workers/job/:job_id/status", s.worker(s.jobStatus))
	r.POST("/api/workers/job/:job_id/logs", s.worker(s.jobLogs))
	r.POST("/api/workers/disconnect", s.worker(s.disconnect))
	r.GET("/api/workers/queue", s.worker(s.queueCheck))

	// Admin.
	r.GET("/api/admin/workers", s.admin(auth.ScopeAdminWorkers, s.listWorkers))
	r.POST("/api/admin/workers", s.admin(auth.ScopeAdminWorkers, s.createWorker))
	r.GET("/api/admin/workers/:id", s.admin(auth.ScopeAdminWorkers, s.getWorker))
	r.PATCH("/api/admin/workers/:id", s.admin(auth.ScopeAdminWorkers, s.patchWorker))
	r.DELETE("/api/admin/workers/:id", s.admin(auth.ScopeAdminWorkers, s.deleteWorker))
	r.POST("/api/admin/workers/:id/drain", s.admin(auth.ScopeAdminWorkers, s.drainWorker))
	r.POST("/api/admin/workers/:id/resume", s.admin(auth.ScopeAdminWorkers, s.resumeWorker))
	r.POST("/api/admin/workers/:id/token", s.admin(auth.ScopeAdminWorkers, s.rotateToken))
	r.GET("/api/admin/audit", s.admin(auth.ScopeAdminAudit, s.listAudit))
	r.GET("/api/admin/audit/verify", s.admin(auth.ScopeAdminAudit, s.verifyAudit))
	r.GET("/api/auth/whoami", s.admin(scopeAnyCaller, s.whoami))
	r.GET("/api/configs", s.admin(auth.ScopeQueueSubmit, s.listConfigs))
	r.GET("/api/admin/tokens", s.admin(auth.ScopeAll, s.listAdminTokens))
	r.POST("/api/admin/tokens", s.admin(auth.ScopeAll, s.createAdminToken))
	r.DELETE("/api/admin/tokens/:id", s.admin(auth.ScopeAll, s.revokeAdminToken))

	// Queue.
	// httprouter cannot hold /api/queue/submit beside /api/queue/:job_id, so the
	// fixed names are picked out of the parameter.
	submit := s.admin(auth.ScopeQueueSubmit, s.submit)
	stats := s.admin(auth.ScopeQueueView, s.stats)
	getJob := s.admin(auth.ScopeQueueView, s.getJob)
	r.POST("/api/queue/:job_id", func(w http.ResponseWriter, req *http.Request, ps httprouter.Params) {
		if ps.ByName("job_id") != "submit" {
			s.writeError(w, req, errorf(http.StatusMethodNotAllowed, "method_not_allowed", "POST is not allowed on %s", req.URL.Path))
			return
		}
		submit(w, req, ps)
	})
	r.GET("/api/queue/:job_id", func(w http.ResponseWriter, req *http.Request, ps httprouter.Params) {
		if ps.ByName("job_id") == "stats" {
			stats(w, req, ps)
			return
		}
		getJob(w, req, ps)
	})
	r.GET("/api/queue", s.admin(auth.ScopeQueueView, s.listJobs))
	r.POST("/api/queue/:job_id/cancel", s.admin(auth.ScopeQueueCancel, s.cancelJob))
	r.GET("/api/queue/:job_id/logs", s.admin(auth.ScopeQueueView, s.readLogs))
	return r
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	if s.stopping.Load() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "reason": "shutting down"})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.store.Ping(ctx); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "reason": "database unreachable: " + err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// isUnavailable reports whether err means the database could not be reached.
func isUnavailable(err error) bool {
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "connection refused") || strings.Contains(msg, "the database system is shutting down") ||
		strings.Contains(msg, "bad connection") || strings.Contains(msg, "database is closed")
}
