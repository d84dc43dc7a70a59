package e2etest

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/webhook"
)

// WebhookTOML lets an orchestrator's webhooks reach receivers on loopback and
// retry within a fraction of a second; append it with OrchOptions.ExtraTOML.
const WebhookTOML = `[webhook_delivery]
allow_local = true
timeout = "1s"
poll_interval = "100ms"
backoff_min = "50ms"
backoff_max = "200ms"
`

// Hook is one request a Receiver got.
type Hook struct {
	EventID, Event, Attempt, Agent string
	Payload                        webhook.Payload
	Body                           []byte
	Status                         int // what the receiver answered; 499: the sender was gone first
	At                             time.Time
}

// Receiver is a webhook receiver on loopback, as a user would write one: it
// verifies every request's signature (a bad one fails the test), records it
// and answers what Answer says (204 without one).
type Receiver struct {
	T      testing.TB
	URL    string
	Secret string
	srv    *httptest.Server

	mu       sync.Mutex
	hooks    []Hook
	answer   func(Hook) int
	hold     func(*http.Request)
	inflight map[string]int
	overlap  []string
	held     int // requests under way (received, not answered)
}

// StartReceiver listens on a free loopback port (or on addr when given).
func StartReceiver(t testing.TB, addr string) *Receiver {
	t.Helper()
	rc := &Receiver{T: t, inflight: map[string]int{}}
	rc.srv = httptest.NewUnstartedServer(http.HandlerFunc(rc.serve))
	if addr != "" {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		rc.srv.Listener.Close()
		rc.srv.Listener = l
	}
	rc.srv.Start()
	rc.URL = rc.srv.URL + "/hook"
	t.Cleanup(rc.srv.Close)
	return rc
}

// SetSecret is the subscription's secret, as its create reply gave it.
func (rc *Receiver) SetSecret(s string) {
	NoteSecret("webhook secret", s)
	rc.mu.Lock()
	rc.Secret = s
	rc.mu.Unlock()
}

// Answer sets what the receiver answers; Hold runs before it answers (a
// slow receiver, or one that waits for the test).
func (rc *Receiver) Answer(f func(Hook) int) {
	rc.mu.Lock()
	rc.answer = f
	rc.mu.Unlock()
}

func (rc *Receiver) Hold(f func(*http.Request)) {
	rc.mu.Lock()
	rc.hold = f
	rc.mu.Unlock()
}

// Close stops the receiver: connections are refused from here on.
func (rc *Receiver) Close() { rc.srv.Close() }

func (rc *Receiver) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h := Hook{EventID: r.Header.Get(webhook.EventIDHeader), Event: r.Header.Get(webhook.EventHeader),
		Attempt: r.Header.Get(webhook.AttemptHeader), Agent: r.Header.Get("User-Agent"), Body: body, At: time.Now()}
	_ = json.Unmarshal(body, &h.Payload)
	rc.mu.Lock()
	secret, hold := rc.Secret, rc.hold
	if err := webhook.Verify(r.Header.Get(webhook.SignatureHeader), r.Header.Get(webhook.EventIDHeader), secret, body, time.Now(), webhook.DefaultTolerance); err != nil {
		rc.T.Errorf("webhook receiver: a request for %s with a bad signature: %v", h.Event, err)
	}
	keys := []string{"event " + h.EventID}
	if h.Payload.Job != nil {
		keys = append(keys, "job "+h.Payload.Job.ID)
	}
	for _, k := range keys {
		if rc.inflight[k] > 0 {
			rc.overlap = append(rc.overlap, k)
		}
		rc.inflight[k]++
	}
	rc.held++
	rc.mu.Unlock()
	if hold != nil {
		hold(r)
	}
	rc.mu.Lock()
	h.Status = http.StatusNoContent
	if r.Context().Err() != nil {
		h.Status = 499
	} else if rc.answer != nil {
		h.Status = rc.answer(h)
	}
	for _, k := range keys {
		rc.inflight[k]--
	}
	rc.held--
	rc.hooks = append(rc.hooks, h)
	rc.mu.Unlock()
	w.WriteHeader(h.Status)
}

// All lists every request, in the order they were answered.
func (rc *Receiver) All() []Hook {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.hooks)
}

// Accepted lists the requests answered 2xx, in order.
func (rc *Receiver) Accepted() []Hook {
	var out []Hook
	for _, h := range rc.All() {
		if h.Status < 300 {
			out = append(out, h)
		}
	}
	return out
}

// Held is how many requests are under way: received, not yet answered.
func (rc *Receiver) Held() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.held
}

// Overlaps lists the events and jobs that had two requests under way at once.
func (rc *Receiver) Overlaps() []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.overlap)
}

// WaitAccepted waits until n requests were accepted.
func (rc *Receiver) WaitAccepted(n int, timeout time.Duration) []Hook {
	rc.T.Helper()
	Eventually(rc.T, timeout, "webhook deliveries accepted", func() bool { return len(rc.Accepted()) >= n })
	return rc.Accepted()
}

// ByJob groups accepted events by job, in the order they were accepted.
func ByJob(hs []Hook) map[string][]string {
	out := map[string][]string{}
	for _, h := range hs {
		if h.Status < 300 && h.Payload.Job != nil {
			out[h.Payload.Job.ID] = append(out[h.Payload.Job.ID], h.Event)
		}
	}
	return out
}

// OnceEach fails the test when an event was accepted twice.
func OnceEach(t testing.TB, hs []Hook) {
	t.Helper()
	seen := map[string]bool{}
	for _, h := range hs {
		if h.Status >= 300 {
			continue
		}
		if seen[h.EventID] {
			t.Fatalf("event %s (%s) accepted twice", h.EventID, h.Event)
		}
		seen[h.EventID] = true
	}
}

// Subscribe makes a subscription on o for rc through the API.
func (o *Orch) Subscribe(rc *Receiver, name string, events ...string) map[string]any {
	o.T.Helper()
	code, m := o.Do("POST", "/api/admin/webhooks", map[string]any{"name": name, "url": rc.URL, "events": events})
	if code != http.StatusCreated {
		o.T.Fatalf("create webhook: HTTP %d %v", code, m)
	}
	rc.SetSecret(m["secret"].(string))
	return m
}

// Deliveries lists a subscription's delivery log, newest first.
func (o *Orch) Deliveries(name string) []map[string]any {
	o.T.Helper()
	_, m := o.Do("GET", "/api/admin/webhooks/"+name+"/deliveries?limit=500", nil)
	var out []map[string]any
	for _, d := range m["deliveries"].([]any) {
		out = append(out, d.(map[string]any))
	}
	return out
}
