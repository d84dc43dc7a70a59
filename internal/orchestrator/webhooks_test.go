package orchestrator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/adminapi"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
	"github.com/simpletuner/simpletuner-orchestration/internal/webhook"
	"github.com/simpletuner/simpletuner-orchestration/internal/webhook/spec"
)

// hookReceiver is a webhook receiver on loopback that checks signatures.
type hookReceiver struct {
	t      testing.TB
	srv    *httptest.Server
	secret string
	mu     sync.Mutex
	got    []webhook.Payload
}

func newHookReceiver(t testing.TB) *hookReceiver {
	h := &hookReceiver{t: t}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		defer h.mu.Unlock()
		if err := webhook.Verify(r.Header.Get(webhook.SignatureHeader), r.Header.Get(webhook.EventIDHeader), h.secret, body, time.Now(), webhook.DefaultTolerance); err != nil {
			t.Errorf("bad signature: %v", err)
		}
		var p webhook.Payload
		if err := json.Unmarshal(body, &p); err != nil {
			t.Errorf("payload %s: %v", body, err)
		}
		h.got = append(h.got, p)
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hookReceiver) events() []webhook.Payload {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.got)
}

// types lists the events received about a job, or about workers ("").
func (h *hookReceiver) types(jobID string) []string {
	var out []string
	for _, p := range h.events() {
		if (jobID == "" && p.Job == nil) || (p.Job != nil && p.Job.ID == jobID) {
			out = append(out, p.Type)
		}
	}
	return out
}

// withWebhooks lets webhooks reach loopback receivers, and retries fast.
func withWebhooks(o *orchestrator.Options) {
	o.Webhooks.Guard = spec.Guard{AllowLocal: true}
	o.Webhooks.PollInterval = 20 * time.Millisecond
	o.Webhooks.BackoffMin, o.Webhooks.BackoffMax = 5*time.Millisecond, 50*time.Millisecond
}

func (e *env) subscribe(h *hookReceiver, events ...string) map[string]any {
	e.t.Helper()
	r := e.Must(e.AdminDo("POST", "/api/admin/webhooks", map[string]any{"name": "hook", "url": h.srv.URL + "/in", "events": events}), 201)
	h.mu.Lock()
	h.secret = r.JSON["secret"].(string)
	h.mu.Unlock()
	return r.JSON
}

func TestWebhookAPI(t *testing.T) {
	t.Parallel()
	e := setup(t, backends["sqlite"](t), withWebhooks)
	h := newHookReceiver(t)
	created := e.subscribe(h, "job.failed", "worker.*")
	secret, _ := created["secret"].(string)
	if !strings.HasPrefix(secret, "whsec_") || created["name"] != "hook" || created["source"] != "api" || created["format"] != "json" {
		t.Fatalf("created %v", created)
	}
	list := e.Must(e.AdminDo("GET", "/api/admin/webhooks", nil), 200)
	if strings.Contains(string(list.Body), secret) || !strings.Contains(string(list.Body), `"events":["job.failed","worker.*"]`) ||
		!strings.Contains(string(list.Body), `"gpu.unhealthy"`) {
		t.Fatalf("list %s", list.Body)
	}
	one := e.Must(e.AdminDo("GET", "/api/admin/webhooks/hook", nil), 200)
	if one.JSON["id"] != created["id"] || strings.Contains(string(one.Body), secret) {
		t.Fatalf("by name: %s", one.Body)
	}
	for _, tc := range []struct {
		body map[string]any
		want string
	}{
		{map[string]any{"name": "x", "url": "ftp://h.example/", "events": []string{"*"}}, `field \"url\": the scheme must be http or https`},
		{map[string]any{"name": "x", "url": "https://h.example/", "events": []string{"job.failed", "job.exploded"}}, `field \"events[1]\": unknown event \"job.exploded\"`},
		{map[string]any{"name": "x", "url": "https://h.example/", "events": []string{}}, `field \"events\"`},
		{map[string]any{"name": "hook", "url": "https://h.example/", "events": []string{"*"}}, `field \"name\": a subscription named \"hook\" exists`},
		{map[string]any{"name": "x", "url": "https://h.example/", "events": []string{"*"}, "format": "xml"}, `field \"format\"`},
		{map[string]any{"name": "x", "url": "https://h.example/", "events": "*"}, `field \"events\" must be an array`},
	} {
		r := e.AdminDo("POST", "/api/admin/webhooks", tc.body)
		if r.Status != 422 || !strings.Contains(string(r.Body), tc.want) {
			t.Errorf("%v: HTTP %d %s, want 422 with %s", tc.body, r.Status, r.Body, tc.want)
		}
	}
	e.Must(e.AdminDo("GET", "/api/admin/webhooks/nope", nil), 404)
	e.Must(e.AdminDo("GET", "/api/admin/webhooks/hook/deliveries?state=lost", nil), 422)
	e.Must(e.AdminDo("GET", "/api/admin/webhooks/hook/deliveries?before=x", nil), 422)

	// The scope: queue.view alone may not see subscriptions.
	tok, token, err := adminapi.NewAdminToken("viewer", []string{auth.ScopeQueueView})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.st.CreateAdminToken(context.Background(), tok, nil); err != nil {
		t.Fatal(err)
	}
	e.Must(e.Do("GET", "/api/admin/webhooks", map[string]string{"Authorization": "Bearer " + token}, nil), 403)

	// A subscription from the configuration cannot be deleted here.
	if err := e.st.SyncConfigWebhooks(context.Background(), []store.Webhook{{ID: "wh_cfg", Name: "cfg", URL: "https://c.example/",
		Events: []string{"*"}, Format: "json", Secret: "0123456789abcdef"}}, func(string, store.Webhook) *audit.Record { return nil }); err != nil {
		t.Fatal(err)
	}
	e.Must(e.AdminDo("DELETE", "/api/admin/webhooks/cfg", nil), 409)
	e.Must(e.AdminDo("DELETE", "/api/admin/webhooks/hook", nil), 200)
	e.Must(e.AdminDo("GET", "/api/admin/webhooks/hook", nil), 404)
	recs := e.Must(e.AdminDo("GET", "/api/admin/audit?action=webhook.", nil), 200)
	if !strings.Contains(string(recs.Body), "webhook.create") || !strings.Contains(string(recs.Body), "webhook.delete") ||
		strings.Contains(string(recs.Body), secret) || strings.Contains(string(recs.Body), "/in") {
		t.Fatalf("audit %s", recs.Body)
	}
}

// A job's whole life reaches a subscriber through the real API and worker
// protocol: queued, started, completed; a worker that goes silent sends
// worker.offline and its running job job.requeued, with the reason.
func TestWebhookJobLife(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t), withWebhooks)
		h := newHookReceiver(t)
		e.subscribe(h, "*")
		a := e.startAgent("box", nil, nil)
		done := e.Submit(map[string]any{})
		a.next("job_submit", eventWait)
		e.Must(a.report(done, "starting", map[string]any{"attempt": 1}), 200)
		e.Must(a.report(done, "completed", map[string]any{"attempt": 1}), 200)
		life := []string{spec.JobQueued, spec.JobStarted, spec.JobCompleted}
		testutil.Eventually(t, eventWait, "the job's events", func() bool { return len(h.types(done)) >= len(life) })
		if got := h.types(done); !slices.Equal(got, life) {
			t.Fatalf("events %v, want %v", got, life)
		}
		for _, p := range h.events() {
			if p.Job != nil && p.Job.ID == done && p.Type == spec.JobCompleted {
				if p.Job.Outcome != "completed" || p.Job.WorkerID != a.id || p.Job.EndedAt == "" || p.Job.Links.Logs != "/api/queue/"+done+"/logs" {
					t.Fatalf("completed: %+v", p.Job)
				}
			}
		}

		lost := e.Submit(map[string]any{})
		a.next("job_submit", eventWait)
		e.Must(a.report(lost, "starting", map[string]any{"attempt": 1}), 200)
		a.silence()
		testutil.Eventually(t, eventWait, "the worker's and the lost job's events", func() bool {
			return slices.Contains(h.types(""), spec.WorkerOffline) && slices.Contains(h.types(lost), spec.JobRequeued)
		})
		for _, p := range h.events() {
			switch {
			case p.Type == spec.WorkerOffline && (p.Worker.ID != a.id || p.Worker.Reason == ""):
				t.Fatalf("offline: %+v", p.Worker)
			case p.Type == spec.JobRequeued && (!strings.Contains(p.Job.Reason, "went offline") || p.Job.Outcome != "worker_lost"):
				t.Fatalf("requeued: %+v", p.Job)
			}
		}
		var metrics strings.Builder
		e.srv.WriteMetrics(context.Background(), &metrics)
		if !strings.Contains(metrics.String(), "simpletuner_webhook_deliveries_total ") {
			t.Fatalf("metrics:\n%s", metrics.String())
		}
		d := e.Must(e.AdminDo("GET", "/api/admin/webhooks/hook/deliveries?limit=2&payload=1", nil), 200)
		ds, _ := d.JSON["deliveries"].([]any)
		if len(ds) != 2 || d.JSON["next"] == nil || !strings.Contains(string(d.Body), `"payload":{"id":"evt_`) {
			t.Fatalf("deliveries %s", d.Body)
		}
	})
}

// A GPU a worker fences sends gpu.unhealthy, once.
func TestWebhookGPUFence(t *testing.T) {
	t.Parallel()
	e := setup(t, backends["sqlite"](t), withWebhooks)
	h := newHookReceiver(t)
	e.subscribe(h, "gpu.*")
	a := e.startAgent("box", nil, nil)
	cond := []map[string]any{{"index": 1, "uuid": "GPU-1", "state": "unhealthy", "reason": "XID 79 (fell off the bus)", "since": "2030-01-01T00:00:00Z"}}
	for range 2 {
		e.Must(a.heartbeat("idle", nil, map[string]any{"gpu_conditions": cond}), 200)
	}
	testutil.Eventually(t, eventWait, "gpu.unhealthy", func() bool { return len(h.types("")) >= 1 })
	d := e.Must(e.AdminDo("GET", "/api/admin/webhooks/hook/deliveries", nil), 200)
	if d.JSON["count"] != float64(1) {
		t.Fatalf("deliveries %s", d.Body)
	}
	evs := h.events()
	if len(evs) != 1 || evs[0].GPU == nil || evs[0].GPU.Index != 1 || evs[0].GPU.Reason != "XID 79 (fell off the bus)" || evs[0].Worker.ID != a.id {
		t.Fatalf("events %+v", evs)
	}
}

// With server.public_url the events' links are absolute.
func TestWebhookLinksUsePublicURL(t *testing.T) {
	t.Parallel()
	e := setup(t, backends["sqlite"](t), withWebhooks, func(o *orchestrator.Options) { o.PublicURL = "https://orch.example" })
	h := newHookReceiver(t)
	e.subscribe(h, "job.queued")
	id := e.Submit(map[string]any{})
	testutil.Eventually(t, eventWait, "job.queued", func() bool { return len(h.types(id)) == 1 })
	if l := h.events()[0].Job.Links; l.Dashboard != "https://orch.example/ui/jobs/"+id || l.Logs != "https://orch.example/api/queue/"+id+"/logs" {
		t.Fatalf("links %+v", l)
	}
}

// A worker that flips its GPUs between unhealthy and healthy in every
// heartbeat makes one gpu.unhealthy per GPU and window, not one per
// heartbeat; the latest fence is sent when the window ends.
func TestWebhookGPUFlapsAreCoalesced(t *testing.T) {
	t.Parallel()
	const window = time.Second
	e := setup(t, backends["sqlite"](t), withWebhooks, func(o *orchestrator.Options) { o.Webhooks.GPUEventWindow = window })
	h := newHookReceiver(t)
	e.subscribe(h, "gpu.*")
	a := e.startAgent("box", nil, map[string]any{"name": "A100", "count": 4, "vram_gb": 80})
	fence := func(reason string) []map[string]any {
		conds := make([]map[string]any, 4)
		for i := range conds {
			conds[i] = map[string]any{"index": i, "uuid": fmt.Sprintf("GPU-%d", i), "state": "unhealthy", "reason": reason, "since": "2030-01-01T00:00:00Z"}
		}
		return conds
	}
	start := time.Now()
	for beat := range 40 {
		conds := fence(fmt.Sprintf("XID 79, flap %d", beat))
		if beat%2 == 1 {
			conds = []map[string]any{}
		}
		e.Must(a.heartbeat("idle", nil, map[string]any{"gpu_conditions": conds}), 200)
	}
	e.Must(a.heartbeat("idle", nil, map[string]any{"gpu_conditions": fence("XID 79, final")}), 200)

	last := func() map[int]string {
		out := map[int]string{}
		for _, p := range h.events() {
			if p.GPU != nil {
				out[p.GPU.Index] = p.GPU.Reason
			}
		}
		return out
	}
	testutil.Eventually(t, 10*time.Second+2*window, "each GPU's final fence", func() bool {
		l := last()
		return len(l) == 4 && l[0] == "XID 79, final" && l[1] == "XID 79, final" && l[2] == "XID 79, final" && l[3] == "XID 79, final"
	})
	// Each event of a GPU opens a window the next one waits for.
	bound := 1 + int(time.Since(start)/window)
	perGPU := map[int]int{}
	for _, p := range h.events() {
		if p.GPU != nil {
			perGPU[p.GPU.Index]++
		}
	}
	for i, n := range perGPU {
		if n > bound {
			t.Errorf("GPU %d: %d gpu.unhealthy events in %s; at most %d with a %s window", i, n, time.Since(start).Round(time.Millisecond), bound, window)
		}
	}
}
