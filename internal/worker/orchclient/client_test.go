package orchclient

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// The worker's requests carry the worker token and session; a view for an
// attempt's uploads carries its upload token and neither of those.
func TestCredentialsPerView(t *testing.T) {
	t.Parallel()
	got := make(chan http.Header, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(srv.Close)
	c, err := New(srv.URL, "wt_worker", TLS{})
	if err != nil {
		t.Fatal(err)
	}
	c.SetSession("inst-1")
	if err := c.DoJSON(context.Background(), 5*time.Second, "probe", http.MethodPost, "/a", map[string]int{}, nil); err != nil {
		t.Fatal(err)
	}
	h := <-got
	if h.Get(HeaderWorkerToken) != "wt_worker" || h.Get(protocol.HeaderWorkerSession) != "inst-1" || h.Get(HeaderUploadToken) != "" {
		t.Fatalf("worker request headers: %v", h)
	}
	up := c.WithUploadToken("up_attempt")
	if err := up.Call(context.Background(), Call{Op: "commit", Method: http.MethodPost, Path: "/b", Timeout: 5 * time.Second, Want: http.StatusCreated}); err != nil {
		t.Fatal(err)
	}
	h = <-got
	if h.Get(HeaderUploadToken) != "up_attempt" || h.Get(HeaderWorkerToken) != "" || h.Get(protocol.HeaderWorkerSession) != "" {
		t.Fatalf("upload request headers: %v", h)
	}
}

// An answer other than the one wanted is an *Error with the body's code and
// detail; a 401 to the worker token marks it refused, one to an upload
// token does not.
func TestErrorsAndRefusals(t *testing.T) {
	t.Parallel()
	status := make(chan int, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(<-status)
		_, _ = w.Write([]byte(`{"error":"stale_attempt","detail":"the job moved on"}`))
	}))
	t.Cleanup(srv.Close)
	c, err := New(srv.URL, "wt_worker", TLS{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	status <- http.StatusOK
	err = c.Call(ctx, Call{Op: "commit x", Method: http.MethodPost, Path: "/c", Timeout: 5 * time.Second, Want: http.StatusCreated})
	var e *Error
	if !errors.As(err, &e) || StatusOf(err) != http.StatusOK || CodeOf(err) != "stale_attempt" ||
		err.Error() != "commit x: HTTP 200: the job moved on (stale_attempt)" {
		t.Fatalf("a 200 where 201 was wanted: %v", err)
	}

	status <- http.StatusUnauthorized
	err = c.WithUploadToken("up_x").Call(ctx, Call{Op: "list", Method: http.MethodGet, Path: "/c", Timeout: 5 * time.Second})
	if StatusOf(err) != http.StatusUnauthorized || RefusedToken(err) != "" {
		t.Fatalf("upload 401: %v (refused %q)", err, RefusedToken(err))
	}
	if ch := c.Token().waitUsable(); ch != nil {
		t.Fatal("a 401 to an upload token refused the worker token")
	}

	status <- http.StatusUnauthorized
	err = c.DoJSON(ctx, 5*time.Second, "heartbeat", http.MethodPost, "/hb", nil, nil)
	if RefusedToken(err) != "wt_worker" || c.Token().waitUsable() == nil {
		t.Fatalf("worker 401: %v; the token is not marked refused", err)
	}
}
