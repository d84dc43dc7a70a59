package ctl

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/webhook/spec"
)

// webhooks create --secret-file: the secret is the file's, so the command
// never writes it out again, in either output format.
func TestWebhooksCreateSecretFileNotEchoed(t *testing.T) {
	const secret = "a-secret-from-a-file-0123456789"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req spec.CreateRequest
		body, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPost || r.URL.Path != "/api/admin/webhooks" || json.Unmarshal(body, &req) != nil || req.Secret != secret {
			http.Error(w, "unexpected request", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(spec.Created{Subscription: spec.Subscription{ID: "wh_abc", Name: req.Name, URL: req.URL,
			Events: req.Events, Format: "json", Source: "api"}, Secret: req.Secret})
	}))
	defer srv.Close()
	file := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(file, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"SIMPLETUNER_URL": srv.URL}
	args := []string{"webhooks", "create", "ops", "--url", "https://hooks.example.com/x", "--event", "job.failed", "--secret-file", file}
	r := runMain(t, env, "", args...)
	if r.code != 0 || !strings.Contains(r.stdout, "created webhook subscription ops (wh_abc)") || !strings.Contains(r.stdout, file) {
		t.Fatalf("exit %d\nstdout %q\nstderr %q", r.code, r.stdout, r.stderr)
	}
	j := runMain(t, env, "", append(args, "-o", "json")...)
	if j.code != 0 || !strings.Contains(j.stdout, `"wh_abc"`) {
		t.Fatalf("-o json: exit %d\nstdout %q\nstderr %q", j.code, j.stdout, j.stderr)
	}
	for _, out := range []string{r.stdout, r.stderr, j.stdout, j.stderr} {
		if strings.Contains(out, secret) {
			t.Fatalf("the secret from --secret-file was echoed: %q", out)
		}
	}
}

// A subscription dropping its events says so in the list and in show.
func TestWebhooksShowDropping(t *testing.T) {
	sub := spec.Subscription{ID: "wh_abc", Name: "ops", URL: "https://hooks.example.com/x", Events: []string{"*"}, Format: "json",
		Pending: 1000, Dropping: true, DroppingSince: "2026-03-01T11:00:00Z"}
	for _, wide := range []bool{false, true} {
		var b strings.Builder
		if err := (renderer{now: fixtureNow, wide: wide}).webhooks(&b, []spec.Subscription{sub}); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), "1000 DROPPING") {
			t.Fatalf("list (wide %v):\n%s", wide, b.String())
		}
	}
	var b strings.Builder
	if err := (renderer{now: fixtureNow}).webhook(&b, sub, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "new events are dropped since 2026-03-01T11:00:00Z") ||
		!strings.Contains(b.String(), "webhook_delivery.max_pending") {
		t.Fatalf("show:\n%s", b.String())
	}
}
