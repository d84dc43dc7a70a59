package dashboard

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator"
	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
	"github.com/simpletuner/simpletuner-orchestration/internal/webhook"
	"github.com/simpletuner/simpletuner-orchestration/internal/webhook/spec"
)

var secretField = regexp.MustCompile(`value="(whsec_[^"]+)" data-webhook-secret`)

func TestWebhookPages(t *testing.T) {
	t.Parallel()
	s := newSite(t, openSQLite(t), func(o *orchestrator.Options) {
		// As [webhook_delivery] allow_networks = ["127.0.0.1/32"] does.
		o.Webhooks.Guard = spec.Guard{Allow: []spec.AllowRule{{Network: netip.MustParsePrefix("127.0.0.1/32")}}}
		o.Webhooks.PollInterval = 20 * time.Millisecond
		o.Webhooks.MaxPending = 4
	})
	var mu sync.Mutex
	var secret string
	var got []string
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if err := webhook.Verify(r.Header.Get(webhook.SignatureHeader), r.Header.Get(webhook.EventIDHeader), secret, body, time.Now(), webhook.DefaultTolerance); err != nil {
			t.Errorf("signature: %v", err)
		}
		got = append(got, r.Header.Get(webhook.EventHeader))
	}))
	t.Cleanup(rc.Close)
	b := s.browser()
	b.mustSignIn(s.admin)

	p := b.must(b.get("/ui/webhooks"), 200)
	contains(t, p, `href="/ui/webhooks" aria-current="page"`, "No webhook subscription yet.", `value="job.failed"`, "gpu.unhealthy")

	// Mistakes come back beside their fields, the form kept (but never the secret).
	p = b.must(b.post("/ui/webhooks", url.Values{"name": {"ci"}, "url": {"http://[::1]:9/in"}, "events": {"job.queued"}, "secret": {"0123456789abcdef-x"}}), 422)
	contains(t, p, `id="h-url-error"`, "loopback address", `value="ci"`)
	lacks(t, p, "0123456789abcdef-x")
	p = b.must(b.post("/ui/webhooks", url.Values{"name": {"ci"}, "url": {"https://x.example/"}}), 422)
	contains(t, p, `id="h-events-error"`, "Pick at least one event.")

	p = b.must(b.post("/ui/webhooks", url.Values{"name": {"ci"}, "url": {rc.URL + "/in"}, "events": {"job.queued", "job.cancelled"}}), 201)
	m := secretField.FindStringSubmatch(p.Body)
	if m == nil || p.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("the secret is not shown once: %s", p.Body)
	}
	mu.Lock()
	secret = m[1]
	mu.Unlock()
	contains(t, p, "shown only this once", "job.cancelled, job.queued")
	p = b.must(b.get("/ui/webhooks"), 200)
	contains(t, p, `data-webhook="ci"`, "http://127.0.0.1")
	lacks(t, p, secret)

	code, job := s.adminAPI("POST", "/api/queue/submit", map[string]any{"config": map[string]any{"a": 1}})
	if code != 201 {
		t.Fatalf("submit: %d %v", code, job)
	}
	testutil.Eventually(t, 10*time.Second, "the event delivered", func() bool {
		p := b.get("/ui/webhooks/ci")
		return strings.Contains(p.Body, `badge d-delivered`)
	})
	p = b.must(b.get("/ui/webhooks/ci?state=delivered"), 200)
	contains(t, p, "job.queued", "job:"+job["job_id"].(string), "HTTP 200", "0 pending, 0 given up")
	lacks(t, p, secret)
	p = b.must(b.get("/ui/webhooks/ci?state=failed"), 200)
	contains(t, p, "No delivery failed yet.")

	// A subscription whose receiver is down piles up pending deliveries
	// until it drops new events, and both pages say so.
	rc.Close()
	for range 4 {
		if code, _ := s.adminAPI("POST", "/api/queue/submit", map[string]any{"config": map[string]any{"a": 1}}); code != 201 {
			t.Fatalf("submit: %d", code)
		}
	}
	testutil.Eventually(t, 10*time.Second, "the subscription dropping", func() bool {
		return strings.Contains(b.get("/ui/webhooks").Body, `>dropping</span>`)
	})
	contains(t, b.must(b.get("/ui/webhooks/ci"), 200), "<strong>dropping new events</strong>", "webhook_delivery.max_pending")

	p = b.must(b.post("/ui/webhooks/ci/delete", url.Values{}), 422)
	contains(t, p, `id="h-confirm-error"`)
	p = b.must(b.post("/ui/webhooks/ci/delete", url.Values{"confirm": {"yes"}}), 303)
	if p.Location() != "/ui/webhooks?ok=webhook_deleted" {
		t.Fatalf("after delete: %s", p.Location())
	}
	contains(t, b.must(b.get(p.Location()), 200), "Webhook deleted.", "No webhook subscription yet.")

	// A token without admin.webhooks sees no link, and a refusal.
	v := s.browser()
	v.mustSignIn(s.token("viewer", auth.ScopeQueueView))
	lacks(t, v.must(v.get("/ui/"), 200), `href="/ui/webhooks"`)
	contains(t, v.must(v.get("/ui/webhooks"), 403), "Your token may not do this")
}
