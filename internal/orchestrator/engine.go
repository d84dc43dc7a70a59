package orchestrator

import (
	"context"
	"net/http"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/artifacts"
	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/adminapi"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/authn"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/placement"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// engine is what the admin API asks of the Server (adminapi.Engine): each
// method hands over to the part of the Server that owns it.
type engine struct{ s *Server }

var _ adminapi.Engine = engine{}

func (e engine) Authenticate(w http.ResponseWriter, r *http.Request) (auth.Principal, error) {
	return e.s.authn.Authenticate(w, r)
}

func (e engine) AdminByToken(r *http.Request, token, route string) (auth.Principal, error) {
	return e.s.authn.AdminByToken(r, token, route)
}

func (e engine) PeerIP(r *http.Request) string { return authn.PeerIP(r) }

func (e engine) ViaAdminSocket(r *http.Request) bool { return authn.ViaAdminSocket(r) }

func (e engine) StillAllowed(ctx context.Context, r *http.Request, p auth.Principal, scope string) (bool, error) {
	return e.s.authn.StillAllowed(ctx, r, p, scope)
}

func (e engine) WriteError(w http.ResponseWriter, r *http.Request, err error) {
	e.s.errs.Write(w, r, err)
}

func (e engine) APIError(err error, what string) *api.Error { return e.s.errs.APIError(err, what) }

func (e engine) Wake() { e.s.Wake() }

func (e engine) WakeSchedulers() { e.s.notify.WakeSchedulers() }

func (e engine) RequestCancel(ctx context.Context, jobID, actor, ip string) (store.Job, error) {
	return e.s.moves.RequestCancel(ctx, jobID, actor, ip)
}

func (e engine) Drain(ctx context.Context, id, actor, ip string) (store.Worker, error) {
	return e.s.proto.Drain(ctx, id, actor, ip)
}

func (e engine) Resume(ctx context.Context, id, actor, ip string) (store.Worker, error) {
	return e.s.proto.Resume(ctx, id, actor, ip)
}

func (e engine) Evict(ctx context.Context, wk store.Worker, actor, ip string) error {
	return e.s.proto.Evict(ctx, wk, actor, ip)
}

func (e engine) Deletable(ctx context.Context, wk store.Worker) error {
	return e.s.proto.Deletable(ctx, wk)
}

func (e engine) SendToWorker(workerID, typ string, v any) { e.s.notify.SendToWorker(workerID, typ, v) }

func (e engine) CloseWorkerStream(workerID, reason string) {
	e.s.notify.CloseWorkerStream(workerID, reason)
}

func (e engine) Shown(wk store.Worker) (protocol.WorkerStatus, bool) { return e.s.proto.Shown(wk) }

func (e engine) Reservation() placement.Reservation { return e.s.sched.Reservation() }

func (e engine) LargestWorker() int { return e.s.proto.LargestWorker() }

func (e engine) LatestCheckpoint(ctx context.Context, j store.Job) (*protocol.Checkpoint, int, error) {
	return e.s.proto.LatestCheckpoint(ctx, j)
}

func (e engine) Artifacts() (*artifacts.Store, error) { return e.s.proto.ArtifactStore() }

func (e engine) Stopping() <-chan struct{} { return e.s.stopped }

// apiOptions are the admin API's settings among the Server's.
func (o Options) apiOptions(adminSocketPath string) adminapi.Options {
	return adminapi.Options{
		MaxBodyBytes: o.MaxBodyBytes, ConfigsDir: o.ConfigsDir, PublicURL: o.PublicURL,
		AdminSocketPath: adminSocketPath, MaxRetries: o.MaxRetries,
		MaxLogFollowers: o.MaxLogFollowers, StreamWriteTimeout: o.StreamWriteTimeout, RecheckInterval: o.RecheckInterval,
		FollowFallback: o.followFallback, Teams: o.Teams,
	}
}
