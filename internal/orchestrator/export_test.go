package orchestrator

// Seams for the orchestrator's tests, which live in package
// orchestrator_test and assemble the server as every other package's tests
// do (orchtest.Serve, orchtest.Timers). This file is compiled only into the
// test binary: nothing here is part of the product's API.

import (
	"context"
	"io"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/artifacts"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/authn"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/diskfull"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/gpuhistory"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/hub"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/retention"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/rpc"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/scheduler"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/web"
)

// SetFollowFallback sets how long a log follow waits between two reads of
// the store when no notice wakes it (defaultFollowFallback when unset).
func (o *Options) SetFollowFallback(d time.Duration) { o.followFallback = d }

// SetFleetHistoryEvery sets the time between two counts of the fleet.
func (o *Options) SetFleetHistoryEvery(d time.Duration) { o.fleetHistoryEvery = d }

// NewBare is a Server with options and nothing else: enough for the
// middleware that reads only its options (BodyDeadline).
func NewBare(o Options) *Server {
	s := &Server{}
	s.opt.Store(&o)
	return s
}

// Options is the options the server runs with now.
func (s *Server) Options() Options { return s.options() }

// WriteMetrics writes what /metrics serves.
func (s *Server) WriteMetrics(ctx context.Context, w io.Writer) { s.writeMetrics(ctx, w) }

// The server's parts, for tests that drive or read one directly.

func (s *Server) Hub() *hub.Hub                   { return s.hub }
func (s *Server) Authn() *authn.Authenticator     { return s.authn }
func (s *Server) Retention() *retention.Keeper    { return s.retention }
func (s *Server) Artifacts() *artifacts.Store     { return s.artifacts.Load() }
func (s *Server) Disk() *diskfull.State           { return s.disk }
func (s *Server) Errs() *web.Errors               { return s.errs }
func (s *Server) GPUHistory() *gpuhistory.History { return s.gpuHistory }
func (s *Server) Scheduler() *scheduler.Scheduler { return s.sched }
func (s *Server) Uploads() *rpc.Uploads           { return s.uploads }
