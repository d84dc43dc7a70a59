package web

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/artifacts"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// FuzzDecodeBody: any bytes give a value or a 400/422 apiError, never a panic.
func FuzzDecodeBody(f *testing.F) {
	for _, s := range []string{`{"name":"x","gpu_info":{"count":2}}`, `{"status":"idle","worker_id":"w_1"}`,
		`[`, `{"priority": 1e999}`, `{"labels":{"a":1}}`, `null`, `"str"`, `{"running":[{"job_id":1}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		targets := []any{&protocol.RegisterRequest{}, &protocol.HeartbeatRequest{}, &protocol.StatusReport{},
			&api.Submit{}, &api.CreateWorker{}, &api.PatchWorker{}, &api.CreateToken{}}
		for _, v := range targets {
			err := DecodeBody(body, v)
			if err == nil {
				continue
			}
			ae, ok := err.(*api.Error)
			if !ok || (ae.Status != 400 && ae.Status != 422) || ae.Body.Detail == "" {
				t.Fatalf("decode %T of %q: %v", v, body, err)
			}
		}
	})
}

func TestDocName(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		r    Route
		want string
	}{
		{NewRoute("POST", "/api/admin/workers/:id/gpus/:index/clear", "", nil), "POST /api/admin/workers/{id}/gpus/{index}/clear"},
		{NewRoute("POST", "/api/queue/:job_id", "POST /api/queue/submit", nil), "POST /api/queue/submit"},
		{NewRoute("GET", "/healthz", "", nil), "GET /healthz"},
	} {
		if got := c.r.DocName(); got != c.want {
			t.Errorf("%s %s: %q; want %q", c.r.Method, c.r.Path, got, c.want)
		}
	}
}

// An upload refused for the disk's reserve is 507 and says which setting
// refused it.
func TestArtifactReserveIs507(t *testing.T) {
	err := ArtifactError(slog.New(slog.DiscardHandler), fmt.Errorf("put: %w",
		&artifacts.ReserveError{Percent: 5, Resource: "inodes", Free: 10, Reserved: 50}))
	ae, ok := err.(*api.Error)
	if !ok || ae.Status != http.StatusInsufficientStorage || ae.Body.Error != protocol.CodeInsufficientStorage ||
		!strings.Contains(ae.Body.Detail, "artifacts.reserve_percent = 5 % of its inodes") {
		t.Fatalf("%#v", err)
	}
}
