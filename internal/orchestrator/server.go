// Package orchestrator assembles simpletuner-orchestratord's engine from
// its parts and serves them: the job moves (package transitions), the
// worker protocol and the jobs' uploads (package rpc), the scheduling pass
// (package scheduler), authentication (package authn) and the admin and
// queue API (package adminapi), over one store. It keeps only what ties
// them together: the options and their reload, the background loops, the
// health probes, /metrics and the shutdown. State lives behind
// store.Store; no part speaks SQL.
package orchestrator

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/simpletuner/simpletuner-orchestration/internal/artifacts"
	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/identity"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/adminapi"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/authn"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/diskfull"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/gpuhistory"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/hub"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/liveness"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/logfeed"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/retention"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/rpc"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/scheduler"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/transitions"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/web"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/webhook"
)

// Server holds the orchestrator's live state. Create it with New, then serve
// Handler() on the API listeners and AdminHandler() on the admin socket, and run
// Run for the background loops.
type Server struct {
	store   store.Store
	log     *slog.Logger
	hub     *hub.Hub
	metrics *Metrics
	authn   *authn.Authenticator
	started time.Time
	// opt is replaced whole on reload; readers load it once per use.
	opt      atomic.Pointer[Options]
	stopping atomic.Bool
	// stopped is closed by BeginShutdown, for loops that wait on channels.
	stopped  chan struct{}
	stopOnce sync.Once
	// unready is set while /readyz finds the database silent (logged once).
	unready  atomic.Bool
	storeErr atomic.Pointer[error]
	// adminSocketPath names the unix socket in connection commands given over it.
	adminSocketPath string
	// retention deletes expired history and measures what is kept.
	retention *retention.Keeper
	// artifacts stores what jobs upload; nil answers 503 (see SetArtifacts).
	artifacts atomic.Pointer[artifacts.Store]
	// logFeed passes stored log output to follow streams.
	logFeed *logfeed.Feed
	// heard is what heartbeats told of each worker: attempts they left out,
	// clock skew, the latest GPU numbers, a heartbeat the full disk could
	// not store. gpuHistory keeps the last hours of
	// those numbers and of the fleet's GPUs.
	heard      *liveness.Memory
	gpuHistory *gpuhistory.History
	// freezeFile is the fault suite's freeze hook (see freezehook.go); "" in production.
	freezeFile string
	// disk tracks full disks (package diskfull).
	disk *diskfull.State
	// webhooks turns the store's changes into webhook events and delivers
	// them (internal/webhook).
	webhooks *webhook.Service
	// errs answers failed calls.
	errs *web.Errors
	// api is the admin and queue API, served beside the worker protocol.
	api *adminapi.API
	// sched runs the scheduling passes.
	sched *scheduler.Scheduler
	// notify delivers events to workers and wake-ups to schedulers, here
	// and on other replicas; moves carries out every job move.
	notify *transitions.Notifier
	moves  *transitions.Mover
	// proto serves the worker protocol, uploads the jobs' own uploads.
	proto   *rpc.Protocol
	uploads *rpc.Uploads
}

// SetAdminSocketPath tells the server where its admin socket lives; call it
// before serving (a reload keeps it).
func (s *Server) SetAdminSocketPath(p string) {
	s.adminSocketPath = p
	s.api.SetOptions(s.options().apiOptions(p))
}

// New builds a Server on an open store: the parts, each in its own
// package, wired to one another here.
func New(st store.Store, opt Options, log *slog.Logger) *Server {
	s := &Server{
		freezeFile: freezeFileFromEnv(),
		store:      st,
		log:        log,
		metrics:    NewMetrics(),
		started:    time.Now(),
		logFeed:    logfeed.New(),
		stopped:    make(chan struct{}),
		heard:      liveness.NewMemory(log),
		gpuHistory: gpuhistory.New(),
		disk:       diskfull.New(log),
		hub:        hub.New(log),
	}
	s.errs = &web.Errors{Log: log, Disk: s.disk}
	opt = opt.withDefaults()
	s.opt.Store(&opt)
	s.authn = &authn.Authenticator{Store: st, Log: log, Metrics: s.metrics, Options: func() authn.Options { return s.options().authnOptions() },
		Limiter:  auth.NewFailureLimiter(opt.AuthFailuresPerMinute, time.Now),
		Resolver: identity.Resolver{People: st, Groups: func() []config.GroupMapping { return s.options().Groups }}}
	s.webhooks = webhook.New(st, opt.webhookOptions(), log)
	s.retention = &retention.Keeper{Store: st, Artifacts: s.artifacts.Load, Log: log,
		Options: func() retention.Options { return s.options().Retention }, StartupGrace: func() time.Duration { return s.options().StartupGrace },
		Quiet: s.logDiskFullOnce}
	s.wireEngine(st, opt, log)
	s.api = adminapi.New(adminapi.Deps{Auth: s.authn, Errors: s.errs, Scheduler: s.sched, Events: s.notify, Jobs: s.moves,
		Workers: s.proto, Uploads: s.uploads, Stopping: s.stopped, Store: st, Log: log, Heard: s.heard, GPUHistory: s.gpuHistory,
		Webhooks: s.webhooks, LogFeed: s.logFeed}, opt.apiOptions(""))
	return s
}

// wireEngine builds the engine's three roles: the job moves (and the
// notifications that follow them), which call nothing else; the worker
// protocol and the scheduler, which both call the moves.
func (s *Server) wireEngine(st store.Store, opt Options, log *slog.Logger) {
	s.notify = &transitions.Notifier{Hub: s.hub, Bus: st, Log: log, Wake: s.Wake,
		Resync:     func(ctx context.Context) { s.proto.CheckStreamTokens(ctx) },
		InstanceID: func() string { return s.options().InstanceID }}
	s.moves = &transitions.Mover{Store: st, Notify: s.notify, Log: log, Metrics: s.metrics, LogFeed: s.logFeed,
		DiskFull: s.logDiskFullOnce, NoteStore: s.noteStore, Options: func() transitions.Options { return s.options().moveOptions() }}
	s.proto = &rpc.Protocol{Store: st, Hub: s.hub, Moves: s.moves, Notify: s.notify, Authn: s.authn, Errors: s.errs, Log: log,
		Metrics: s.metrics, Heard: s.heard, GPUHistory: s.gpuHistory, Disk: s.disk, LogFeed: s.logFeed,
		Wake: s.Wake, Stopping: s.stopping.Load, Started: s.started, NoteStore: s.noteStore,
		Options: func() rpc.Options { return s.options().protocolOptions() }}
	s.uploads = &rpc.Uploads{Store: st, Authn: s.authn, Errors: s.errs, Log: log, Metrics: s.metrics, Artifacts: s.artifacts.Load,
		Options: func() rpc.Options { return s.options().protocolOptions() }}
	s.sched = &scheduler.Scheduler{Store: st, Streams: s.hub, Moves: s.moves, Log: log, Metrics: s.metrics,
		CheckpointsEndpoint: s.uploads.CheckpointsEndpoint, Stopping: s.stopping.Load, Freeze: s.freezeWhileFileExists,
		NoteStore: s.noteStore, DiskFull: s.logDiskFullOnce}
	s.sched.Init(opt.schedulerOptions())
}

// SetSignInProviders tells the API which identity providers people sign in
// with from the command line; call it before serving.
func (s *Server) SetSignInProviders(p adminapi.SignInProviders) { s.api.SetSignInProviders(p) }

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
	s.sched.SetOptions(o.schedulerOptions())
	s.applyArtifactLimits(o)
	s.Wake()
}

// Wake asks the scheduler for a pass soon; it never blocks.
func (s *Server) Wake() { s.sched.Wake() }

// BeginShutdown makes /readyz answer 503, stops handing out jobs and closes
// every worker stream. A scheduler pass under way stops before its next
// claim, so no job is claimed for a stream that is closing. From here on the
// loops judge no deadline and no silence: acknowledgements, reports and
// heartbeats can no longer arrive, and the next instance judges them.
func (s *Server) BeginShutdown() {
	s.stopping.Store(true)
	s.sched.WaitPass()
	s.stopOnce.Do(func() { close(s.stopped) })
	s.hub.CloseAll()
}

// AdminConnContext records the peer credentials of an admin-socket connection;
// use it as http.Server.ConnContext for that listener.
func (s *Server) AdminConnContext(ctx context.Context, c net.Conn) context.Context {
	return s.authn.ConnContext(ctx, c)
}

// Routes lists every endpoint of the HTTP API, as Handler serves them.
func (s *Server) Routes() []web.Route {
	return append([]web.Route{
		web.NewRoute("GET", "/healthz", "", s.healthz),
		web.NewRoute("GET", "/readyz", "", s.readyz),
	}, slices.Concat(s.proto.Routes(), s.uploads.Routes(), s.api.Routes())...)
}

// Handler is the HTTP API served on every listener.
func (s *Server) Handler() http.Handler {
	r := httprouter.New()
	r.HandleMethodNotAllowed = true
	r.NotFound = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		s.errs.Write(w, req, web.NotFound("no such endpoint: %s %s", req.Method, req.URL.Path))
	})
	r.MethodNotAllowed = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		s.errs.Write(w, req, web.Errorf(http.StatusMethodNotAllowed, "method_not_allowed", "%s is not allowed on %s", req.Method, req.URL.Path))
	})
	r.PanicHandler = func(w http.ResponseWriter, req *http.Request, v any) {
		s.log.Error("handler panic", "path", req.URL.Path, "panic", v)
		s.errs.Write(w, req, errors.New("panic"))
	}
	for _, rt := range s.Routes() {
		r.Handle(rt.Method, rt.Path, rt.Handle)
	}
	return r
}
