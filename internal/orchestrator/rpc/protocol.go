// Package rpc is the worker protocol's server side: a worker's
// registration and reconciliation, its event stream, heartbeats, reports
// and log output, its GPUs' conditions, its session, the health pass that
// marks silent workers offline (Protocol); and a job's own uploads and
// checkpoints under its attempt's upload token (Uploads). Job moves it asks of package
// transitions; what the admin may do to a worker (drain, resume, delete)
// is here too, for package adminapi to call.
package rpc

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/authn"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/diskfull"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/gpuhistory"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/hub"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/liveness"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/logfeed"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/metrics"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/transitions"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/web"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// Store is what the worker protocol reads and writes.
type Store interface {
	GetWorkerState(ctx context.Context, id string) (store.WorkerState, error)
	ListWorkers(ctx context.Context, f store.WorkerFilter) (workers []store.Worker, total int, err error)
	UpdateWorker(ctx context.Context, id string, fn func(*store.Worker) (*audit.Record, error)) (store.Worker, error)
	DeleteWorker(ctx context.Context, id string, rec *audit.Record) error
	GetJob(ctx context.Context, id string) (store.Job, error)
	ListQueued(ctx context.Context, after *store.QueuedJob, limit int) ([]store.QueuedJob, error)
	AppendLog(ctx context.Context, jobID string, attempt int, offset int64, data []byte, limit int64) (size int64, truncated bool, err error)
	AppendAudit(ctx context.Context, rec audit.Record) error
}

// Options are the protocol's settings.
type Options struct {
	InstanceID            string
	MaxBodyBytes          int64
	HeartbeatInterval     time.Duration
	HeartbeatTimeout      time.Duration
	PingInterval          time.Duration
	StreamWriteTimeout    time.Duration
	HealthCheckInterval   time.Duration
	StartupGrace          time.Duration
	EphemeralCleanupAfter time.Duration
	LogLimitBytes         int64
	RecheckInterval       time.Duration
	ArtifactUploadGrace   time.Duration
}

// Protocol serves the worker protocol and the jobs' uploads.
type Protocol struct {
	Store   Store
	Hub     *hub.Hub
	Moves   *transitions.Mover
	Notify  *transitions.Notifier
	Authn   *authn.Authenticator
	Errors  *web.Errors
	Log     *slog.Logger
	Metrics *metrics.Metrics
	// Heard is what heartbeats told of each worker; GPUHistory keeps the
	// last hours of their GPU numbers.
	Heard      *liveness.Memory
	GPUHistory *gpuhistory.History
	Disk       *diskfull.State
	LogFeed    *logfeed.Feed
	// Wake asks this instance's scheduler for a pass.
	Wake    func()
	Options func() Options
	// Stopping reports whether the orchestrator is shutting down; Started
	// is when it started.
	Stopping func() bool
	Started  time.Time
	// NoteStore tells the watchdog whether the store answered.
	NoteStore func(err error)

	// largestWorker is the most GPUs any worker has: refreshed by every
	// health pass, raised by registrations. Submit warns above it.
	largestWorker atomic.Int64
	// sessionRefusals spaces out the log line and audit record of a second
	// workerd refused for using a live worker's token.
	sessionRefusals refusalLog
}

// LargestWorker is the most GPUs any worker has.
func (s *Protocol) LargestWorker() int { return int(s.largestWorker.Load()) }

// Routes lists the worker protocol's endpoints.
func (s *Protocol) Routes() []web.Route {
	return []web.Route{
		// Worker protocol.
		web.NewRoute("POST", "/api/workers/register", "", s.worker(s.handleRegister)),
		web.NewRoute("GET", "/api/workers/stream", "", s.worker(s.handleStream)),
		web.NewRoute("POST", "/api/workers/heartbeat", "", s.worker(s.handleHeartbeat)),
		web.NewRoute("POST", "/api/workers/job/:job_id/status", "", s.reportingWorker(s.handleJobStatus)),
		web.NewRoute("POST", "/api/workers/job/:job_id/logs", "", s.reportingWorker(s.handleJobLogs)),
		web.NewRoute("POST", "/api/workers/disconnect", "", s.worker(s.handleDisconnect)),
		web.NewRoute("GET", "/api/workers/queue", "", s.worker(s.handleQueueCheck)),
	}
}
