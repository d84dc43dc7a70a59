// Package orchtest runs a real orchestrator in process for tests: its loops
// running over a real store, its API (or the API with the dashboard mounted)
// on a loopback HTTP server, an admin token with every scope, and typed
// calls of its API (api.go). The orchestrator's own tests (the external
// package orchestrator_test), the dashboard's, the checkpoint keeper's and
// the integration tests start it the same way, with the same timers
// (Timers). It takes the server through the small Server interface rather
// than importing the orchestrator.
package orchtest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// Server is the orchestrator's lifecycle, as *orchestrator.Server has it.
type Server interface {
	Run(ctx context.Context)
	BeginShutdown()
}

// Orch is an orchestrator serving on a loopback address.
type Orch struct {
	T     testing.TB
	Store store.Store
	HTTP  *httptest.Server
	URL   string
	Admin string // an admin token with every scope

	stop func()
}

// Serve runs srv's loops and serves handler on a loopback address until the
// test ends or Stop. admin is the admin token to use; "" makes one (an
// orchestrator restarted over the same store passes the one it had).
func Serve(t testing.TB, st store.Store, srv Server, handler http.Handler, admin string) *Orch {
	t.Helper()
	hs := httptest.NewServer(handler)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Run(ctx); close(done) }()
	o := &Orch{T: t, Store: st, HTTP: hs, URL: hs.URL, Admin: admin}
	var once sync.Once
	o.stop = func() {
		once.Do(func() {
			srv.BeginShutdown()
			hs.CloseClientConnections()
			hs.Close()
			cancel()
			<-done
		})
	}
	t.Cleanup(o.Stop)
	if admin == "" {
		o.Admin = AdminToken(t, st, "test-admin", auth.ScopeAll)
	}
	return o
}

// Stop shuts the orchestrator down as a SIGTERM would, and waits for it.
func (o *Orch) Stop() { o.stop() }

// AdminToken stores a new admin token with scopes and returns it.
func AdminToken(t testing.TB, st store.Store, name string, scopes ...string) string {
	t.Helper()
	token := auth.NewAdminToken()
	tok := store.AdminToken{ID: protocol.NewTokenID(), Name: name, Scopes: scopes,
		Hash: auth.Hash(token), CreatedAt: time.Now().UTC()}
	if err := st.CreateAdminToken(context.Background(), tok, nil); err != nil {
		t.Fatal(err)
	}
	return token
}

// API calls the API as the admin and returns the status and the reply
// decoded as a JSON object: AdminDo for a test that needs no more.
func (o *Orch) API(method, path string, body any) (int, map[string]any) {
	o.T.Helper()
	r := o.AdminDo(method, path, body)
	return r.Status, r.JSON
}
