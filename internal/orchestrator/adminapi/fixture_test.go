package adminapi

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/artifacts"
	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/placement"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/web"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/store/storetest"
)

// newTestAPI is the API over a fresh SQLite store and an engine that runs
// no orchestrator: enough for what the API computes from the store alone.
func newTestAPI(t *testing.T) (*API, store.Store) {
	st := storetest.Open(t, "sqlite")
	e := idleEngine{}
	return New(Deps{Auth: e, Errors: e, Scheduler: e, Events: e, Jobs: e, Workers: e, Uploads: e,
		Store: st, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, Options{}), st
}

// idleEngine plays every role the API asks of the orchestrator with no
// scheduler, streams or credentials: it refuses whatever needs them.
type idleEngine struct{}

var errNoEngine = web.Errorf(http.StatusServiceUnavailable, protocol.CodeUnavailable, "no engine in this test")

func (idleEngine) Authenticate(http.ResponseWriter, *http.Request) (auth.Principal, error) {
	return auth.Principal{}, errNoEngine
}
func (idleEngine) AdminByToken(*http.Request, string, string) (auth.Principal, error) {
	return auth.Principal{}, errNoEngine
}
func (idleEngine) PasswordLimited(*http.Request, string) error { return nil }
func (idleEngine) PasswordRefused(*http.Request, string) error { return errNoEngine }
func (idleEngine) TokenPrincipal(_ context.Context, t store.AdminToken) (auth.Principal, error) {
	return auth.Principal{Kind: auth.KindAdminToken, ID: t.ID, TokenID: t.ID, Name: t.Name, Scopes: t.Scopes, Team: t.Team}, nil
}
func (idleEngine) StillAllowed(_ context.Context, _ *http.Request, p auth.Principal, _ string) (auth.Principal, bool, error) {
	return p, false, nil
}
func (idleEngine) Write(w http.ResponseWriter, _ *http.Request, err error) {
	ae := api.ErrorOf(err)
	if ae == nil {
		ae = web.Errorf(http.StatusInternalServerError, protocol.CodeInternal, "%v", err)
	}
	web.WriteJSON(w, ae.Status, ae.Body)
}
func (idleEngine) APIError(err error, _ string) *api.Error { return api.ErrorOf(err) }
func (idleEngine) Wake()                                   {}
func (idleEngine) WakeSchedulers()                         {}
func (idleEngine) RequestCancel(context.Context, string, string, string) (store.Job, error) {
	return store.Job{}, errNoEngine
}
func (idleEngine) Drain(context.Context, string, string, string) (store.Worker, error) {
	return store.Worker{}, errNoEngine
}
func (idleEngine) Resume(context.Context, string, string, string) (store.Worker, error) {
	return store.Worker{}, errNoEngine
}
func (idleEngine) Evict(context.Context, store.Worker, string, string) error { return errNoEngine }
func (idleEngine) Deletable(context.Context, store.Worker) error             { return nil }
func (idleEngine) SendToWorker(string, string, any)                          {}
func (idleEngine) CloseWorkerStream(string, string)                          {}
func (idleEngine) Shown(wk store.Worker) (protocol.WorkerStatus, bool)       { return wk.Status, false }
func (idleEngine) Reservation() placement.Reservation                        { return placement.Reservation{} }
func (idleEngine) LargestWorker() int                                        { return 0 }
func (idleEngine) LatestCheckpoint(context.Context, store.Job) (*protocol.Checkpoint, int, error) {
	return nil, 0, nil
}
func (idleEngine) ArtifactStore() (*artifacts.Store, error) { return nil, errNoEngine }
