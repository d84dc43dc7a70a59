// Package orchestrator is simpletuner-orchestratord's engine: the worker
// protocol and the jobs' own uploads, the SSE hub that delivers events to
// workers, the scheduler that claims jobs for idle workers, the job
// transitions and the health loop. It serves the admin and queue API of
// package adminapi beside its own endpoints. State lives behind
// store.Store; this package never speaks SQL.
package orchestrator

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/simpletuner/simpletuner-orchestration/internal/artifacts"
	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/adminapi"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/authfail"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/diskfull"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/fairshare"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/gpuhistory"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/hub"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/liveness"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/logfeed"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/placement"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/retention"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/web"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/version"
	"github.com/simpletuner/simpletuner-orchestration/internal/webhook"
)

// Options are the orchestrator's settings. OptionsFrom fills them from the
// configuration, whose defaults are the only built-in values.
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
	// Artifacts: limits per object and per job, and how long an attempt's
	// upload token still works after the attempt ended.
	ArtifactMaxObjectBytes int64
	ArtifactMaxJobBytes    int64
	ArtifactMaxJobObjects  int
	ArtifactReservePercent float64
	ArtifactUploadGrace    time.Duration
	StreamWriteTimeout     time.Duration
	BodyTimeout            time.Duration
	// PublicURL is the orchestrator's address as clients know it (a TLS
	// proxy in front); "" uses the address a request came in on.
	PublicURL            string
	MaxLogFollowers      int
	RecheckInterval      time.Duration
	FailureAuditInterval time.Duration
	FailureAuditMaxPeers int
	// Retention: how long finished jobs and their traces are kept.
	Retention retention.Options
	// Webhooks: how events reach the webhook subscriptions, and those of
	// the configuration.
	Webhooks webhook.Options
	// Teams: the teams sharing the fleet, and preemption.
	Teams fairshare.Policy

	// followFallback replaces defaultFollowFallback when set: tests that
	// count store reads put the fallback look out of their way.
	followFallback time.Duration
	// fleetHistoryEvery replaces the minute between two counts of the
	// fleet's GPUs for the charts (tests).
	fleetHistoryEvery time.Duration
}

// OptionsFrom maps a loaded configuration onto the orchestrator's settings.
// An unset instance id becomes hostname:pid, unique per process.
func OptionsFrom(cfg *config.Orchestrator) Options {
	id := cfg.Server.InstanceID
	if id == "" {
		host, _ := os.Hostname()
		id = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	w, j := cfg.Workers, cfg.Jobs
	return Options{
		InstanceID:            id,
		MaxBodyBytes:          cfg.Server.MaxBodyBytes,
		AdminGroup:            cfg.Server.AdminGroup,
		ConfigsDir:            cfg.Paths.ConfigsDir,
		HeartbeatInterval:     w.HeartbeatInterval.Duration,
		HeartbeatTimeout:      w.HeartbeatTimeout.Duration,
		HealthCheckInterval:   w.HealthCheckInterval.Duration,
		StartupGrace:          w.StartupGrace.Duration,
		AckTimeout:            w.AckTimeout.Duration,
		EphemeralCleanupAfter: w.EphemeralCleanupAfter.Duration,
		PingInterval:          w.PingInterval.Duration,
		SchedulerInterval:     j.SchedulerInterval.Duration,
		MaxRetries:            j.MaxRetries,
		CancelGrace:           j.CancelGrace.Duration,
		CancelReportTimeout:   j.CancelReportTimeout.Duration,
		LogLimitBytes:         j.LogLimitBytes,
		AuthFailuresPerMinute: cfg.Auth.FailuresPerMinute,

		ArtifactMaxObjectBytes: cfg.Artifacts.MaxObjectBytes,
		ArtifactMaxJobBytes:    cfg.Artifacts.MaxJobBytes,
		ArtifactMaxJobObjects:  cfg.Artifacts.MaxJobObjects,
		ArtifactReservePercent: cfg.Artifacts.ReservePercent,
		ArtifactUploadGrace:    cfg.Artifacts.UploadGrace.Duration,
		StreamWriteTimeout:     cfg.Server.StreamWriteTimeout.Duration,
		BodyTimeout:            cfg.Server.BodyTimeout.Duration,
		PublicURL:              strings.TrimSuffix(cfg.Server.PublicURL, "/"),
		MaxLogFollowers:        cfg.Server.MaxLogFollowers,
		RecheckInterval:        cfg.Auth.RecheckInterval.Duration,
		FailureAuditInterval:   cfg.Auth.FailureAuditInterval.Duration,
		FailureAuditMaxPeers:   cfg.Auth.FailureAuditMaxPeers,

		Retention: retention.OptionsFrom(cfg.Retention),
		Webhooks:  webhook.OptionsFrom(cfg),
		Teams:     fairshare.PolicyFrom(cfg),
	}
}

// withDefaults fills the settings this file's loops and streams cannot do
// without (a zero ticker period panics, a zero cap refuses everyone) from the
// configuration's defaults, for Options built by hand.
func (o Options) withDefaults() Options {
	def := OptionsFrom(config.DefaultOrchestrator())
	if o.StreamWriteTimeout <= 0 {
		o.StreamWriteTimeout = def.StreamWriteTimeout
	}
	if o.MaxLogFollowers <= 0 {
		o.MaxLogFollowers = def.MaxLogFollowers
	}
	if o.BodyTimeout <= 0 {
		o.BodyTimeout = def.BodyTimeout
	}
	if o.RecheckInterval <= 0 {
		o.RecheckInterval = def.RecheckInterval
	}
	if o.FailureAuditInterval <= 0 {
		o.FailureAuditInterval = def.FailureAuditInterval
	}
	if o.FailureAuditMaxPeers <= 0 {
		o.FailureAuditMaxPeers = def.FailureAuditMaxPeers
	}
	// The retention loop waits Interval between passes: zero would spin.
	if o.Retention.Interval <= 0 {
		o.Retention.Interval = def.Retention.Interval
	}
	if o.Retention.BatchSize <= 0 {
		o.Retention.BatchSize = def.Retention.BatchSize
	}
	if len(o.Teams.Teams) == 0 {
		o.Teams = def.Teams
	}
	return o
}

// webhookOptions are the webhook delivery's settings, with this instance's
// name for the leases it takes.
func (o Options) webhookOptions() webhook.Options {
	w := o.Webhooks
	w.InstanceID = o.InstanceID
	w.UserAgent = "simpletuner-orchestratord/" + version.Version
	w.BaseURL = o.PublicURL
	return w
}

// Server holds the orchestrator's live state. Create it with New, then serve
// Handler() on the API listeners and AdminHandler() on the admin socket, and run
// Run for the background loops.
type Server struct {
	store   store.Store
	log     *slog.Logger
	hub     *hub.Hub
	metrics *Metrics
	limiter *auth.FailureLimiter
	started time.Time
	wake    chan struct{}
	// opt is replaced whole on reload; readers load it once per use.
	opt      atomic.Pointer[Options]
	stopping atomic.Bool
	// stopped is closed by BeginShutdown, for loops that wait on channels.
	stopped  chan struct{}
	stopOnce sync.Once
	// unready is set while /readyz finds the database silent (logged once).
	unready atomic.Bool
	// lastTick is when the scheduler last finished a pass (unix nanos); the
	// watchdog and /readyz look at it.
	lastTick atomic.Int64
	storeErr atomic.Pointer[error]
	// passMu is held by a scheduler pass; shutdown waits on it.
	passMu sync.Mutex
	// res is the worker held for a job no worker had room for (see
	// schedulePass); resMu guards it for the waiting reasons.
	resMu sync.Mutex
	res   placement.Reservation
	// largestWorker is the most GPUs any worker has: refreshed by every
	// health pass, raised by registrations. Submit warns above it.
	largestWorker atomic.Int64
	// adminSocketPath names the unix socket in connection commands given over it.
	adminSocketPath string
	// retention deletes expired history and measures what is kept.
	retention *retention.Keeper
	// artifacts stores what jobs upload; nil answers 503 (see SetArtifacts).
	artifacts atomic.Pointer[artifacts.Store]
	// logFeed passes stored log output to follow streams.
	logFeed *logfeed.Feed
	// failures gathers failed authentications for the audit log.
	failures authfail.Gatherer
	// heard is what heartbeats told of each worker: attempts they left out,
	// clock skew, the latest GPU numbers, a heartbeat the full disk could
	// not store. gpuHistory keeps the last hours of
	// those numbers and of the fleet's GPUs.
	heard      *liveness.Memory
	gpuHistory *gpuhistory.History
	// sessionRefusals spaces out the log line and audit record of a second
	// workerd refused for using a live worker's token.
	sessionRefusals refusalLog
	// freezeFile is the fault suite's freeze hook (see freezehook.go); "" in production.
	freezeFile string
	// disk tracks full disks (package diskfull).
	disk *diskfull.State
	// webhooks turns the store's changes into webhook events and delivers
	// them (internal/webhook).
	webhooks *webhook.Service
	// api is the admin and queue API, served beside the worker protocol.
	api *adminapi.API
	// teams is what scheduler passes reuse of the teams' standing.
	teams teamCache
}

// SetAdminSocketPath tells the server where its admin socket lives; call it
// before serving (a reload keeps it).
func (s *Server) SetAdminSocketPath(p string) {
	s.adminSocketPath = p
	s.api.SetOptions(s.options().apiOptions(p))
}

// New builds a Server on an open store.
func New(st store.Store, opt Options, log *slog.Logger) *Server {
	s := &Server{
		freezeFile: freezeFileFromEnv(),
		store:      st,
		log:        log,
		metrics:    NewMetrics(),
		started:    time.Now(),
		wake:       make(chan struct{}, 1),
		limiter:    auth.NewFailureLimiter(opt.AuthFailuresPerMinute, time.Now),
		logFeed:    logfeed.New(),
		stopped:    make(chan struct{}),
		heard:      liveness.NewMemory(log),
		gpuHistory: gpuhistory.New(),
		disk:       diskfull.New(log),
	}
	opt = opt.withDefaults()
	s.opt.Store(&opt)
	s.webhooks = webhook.New(st, opt.webhookOptions(), log)
	s.hub = hub.New(log)
	s.retention = &retention.Keeper{Store: st, Artifacts: s.artifacts.Load, Log: log,
		Options: func() retention.Options { return s.options().Retention }, StartupGrace: func() time.Duration { return s.options().StartupGrace },
		Quiet: s.logDiskFullOnce}
	s.api = adminapi.New(adminapi.Deps{Engine: engine{s}, Store: st, Log: log, Heard: s.heard, GPUHistory: s.gpuHistory,
		Webhooks: s.webhooks, LogFeed: s.logFeed}, opt.apiOptions(""))
	s.lastTick.Store(time.Now().UnixNano())
	return s
}

// API is the admin and queue API, for callers in process (the dashboard).
func (s *Server) API() *adminapi.API { return s.api }

// options returns the current settings (a reload may replace them).
func (s *Server) options() Options { return *s.opt.Load() }

// SetOptions applies settings that can change without a restart.
func (s *Server) SetOptions(o Options) {
	o = o.withDefaults()
	s.opt.Store(&o)
	s.webhooks.SetOptions(o.webhookOptions())
	s.api.SetOptions(o.apiOptions(s.adminSocketPath))
	s.applyArtifactLimits(o)
	s.Wake()
}

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

// BeginShutdown makes /readyz answer 503, stops handing out jobs and closes
// every worker stream. A scheduler pass under way stops before its next
// claim, so no job is claimed for a stream that is closing. From here on the
// loops judge no deadline and no silence: acknowledgements, reports and
// heartbeats can no longer arrive, and the next instance judges them.
func (s *Server) BeginShutdown() {
	s.stopping.Store(true)
	s.passMu.Lock()
	//lint:ignore SA2001 waiting for the pass under way is the point
	s.passMu.Unlock()
	s.stopOnce.Do(func() { close(s.stopped) })
	s.hub.CloseAll()
}

type ctxKey int

const peerKey ctxKey = 1

// localPeer is what the admin unix socket learned about its client.
type localPeer struct {
	uid     uint32
	peer    auth.Peer
	allowed bool
}

// AdminConnContext records the peer credentials of an admin-socket connection;
// use it as http.Server.ConnContext for that listener.
func (s *Server) AdminConnContext(ctx context.Context, c net.Conn) context.Context {
	p, err := auth.PeerOf(c)
	if err != nil {
		s.log.Warn("admin socket: cannot read peer credentials", "err", err)
		return context.WithValue(ctx, peerKey, localPeer{uid: ^uint32(0)})
	}
	peer := localPeer{uid: p.UID, peer: p}
	peer.allowed = s.localAllowed(peer)
	return context.WithValue(ctx, peerKey, peer)
}

// localAllowed reports whether an admin-socket peer is root or in the admin
// group, by the groups its process had when it connected.
func (s *Server) localAllowed(peer localPeer) bool {
	group := s.options().AdminGroup
	ok, how, err := auth.PeerAllowed(peer.peer, group)
	if err != nil {
		s.log.Warn("admin socket: group lookup failed", "uid", peer.uid, "group", group, "err", err)
	}
	s.log.Debug("admin socket peer", "uid", peer.uid, "pid", peer.peer.PID, "allowed", ok, "decided_by", how)
	return ok
}

func peerOf(r *http.Request) (localPeer, bool) {
	p, ok := r.Context().Value(peerKey).(localPeer)
	return p, ok
}

// Routes lists every endpoint of the HTTP API, as Handler serves them.
func (s *Server) Routes() []web.Route {
	return append([]web.Route{
		web.NewRoute("GET", "/healthz", "", s.healthz),
		web.NewRoute("GET", "/readyz", "", s.readyz),

		// Worker protocol.
		web.NewRoute("POST", "/api/workers/register", "", s.worker(s.handleRegister)),
		web.NewRoute("GET", "/api/workers/stream", "", s.worker(s.handleStream)),
		web.NewRoute("POST", "/api/workers/heartbeat", "", s.worker(s.handleHeartbeat)),
		web.NewRoute("POST", "/api/workers/job/:job_id/status", "", s.reportingWorker(s.handleJobStatus)),
		web.NewRoute("POST", "/api/workers/job/:job_id/logs", "", s.reportingWorker(s.handleJobLogs)),
		web.NewRoute("POST", "/api/workers/disconnect", "", s.worker(s.handleDisconnect)),
		web.NewRoute("GET", "/api/workers/queue", "", s.worker(s.handleQueueCheck)),

		// A job's own S3-style uploads, authenticated by its attempt's upload
		// token. Keys hold slashes, hence the catch-all.
		web.NewRoute("GET", "/api/cloud/storage", "", s.upload(s.listBuckets)),
		web.NewRoute("GET", "/api/cloud/storage/:bucket", "", s.upload(s.listObjects)),
		web.NewRoute("PUT", "/api/cloud/storage/:bucket/*key", "PUT /api/cloud/storage/{bucket}/{key}", s.upload(s.putObject)),
		web.NewRoute("GET", "/api/cloud/storage/:bucket/*key", "GET /api/cloud/storage/{bucket}/{key}", s.upload(s.getObject)),
		web.NewRoute("HEAD", "/api/cloud/storage/:bucket/*key", "HEAD /api/cloud/storage/{bucket}/{key}", s.upload(s.getObject)),
		// The job's checkpoints (p2): complete ones listed and read by any
		// attempt of the job, committed and aborted by the one that uploaded.
		web.NewRoute("GET", "/api/cloud/checkpoints", "", s.upload(s.listCheckpoints)),
		web.NewRoute("POST", "/api/cloud/checkpoints", "", s.upload(s.commitCheckpoint)),
		web.NewRoute("DELETE", "/api/cloud/checkpoints/:name", "", s.upload(s.abortCheckpoint)),
		web.NewRoute("GET", "/api/cloud/checkpoints/:attempt/:name/*path", "GET /api/cloud/checkpoints/{attempt}/{name}/{path}", s.upload(s.checkpointFile)),
	}, s.api.Routes()...)
}

// Handler is the HTTP API served on every listener.
func (s *Server) Handler() http.Handler {
	r := httprouter.New()
	r.HandleMethodNotAllowed = true
	r.NotFound = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		s.writeError(w, req, web.NotFound("no such endpoint: %s %s", req.Method, req.URL.Path))
	})
	r.MethodNotAllowed = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		s.writeError(w, req, web.Errorf(http.StatusMethodNotAllowed, "method_not_allowed", "%s is not allowed on %s", req.Method, req.URL.Path))
	})
	r.PanicHandler = func(w http.ResponseWriter, req *http.Request, v any) {
		s.log.Error("handler panic", "path", req.URL.Path, "panic", v)
		s.writeError(w, req, errors.New("panic"))
	}
	for _, rt := range s.Routes() {
		r.Handle(rt.Method, rt.Path, rt.Handle)
	}
	return r
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

// isUnavailable reports whether err means the database could not be reached
// or used just now. Only errors of the database connection count: a file
// error (a config name too long for the file system, say) carries a syscall
// errno that looks like a network error to errors.As, and is not one.
func isUnavailable(err error) bool {
	if err == nil {
		return false
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return false
	}
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) {
		return true
	}
	var oe *net.OpError // dialling or talking to the database server
	if errors.As(err, &oe) {
		return true
	}
	msg := err.Error()
	for _, s := range []string{
		"connection refused", "the database system is shutting down", "the database system is starting up",
		"bad connection", "database is closed", "database is locked", "too many clients",
	} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
