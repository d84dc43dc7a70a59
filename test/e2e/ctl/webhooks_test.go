package ctle2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	. "github.com/simpletuner/simpletuner-orchestration/test/e2e/e2etest"
)

// simpletunerctl webhooks: subscribe a receiver, see its deliveries, delete
// it; the secret appears once, in the create's output.
func TestWebhooksCommands(t *testing.T) {
	t.Parallel()
	o := StartOrchestratorWith(t, OrchOptions{ExtraTOML: WebhookTOML})
	c := overTCP(t, o)
	rc := StartReceiver(t, "")

	r := c.ok("webhooks", "events")
	mustContain(t, "webhooks events", r.Stdout, "job.completed", "worker.offline", "gpu.unhealthy", "checkpoint.saved")

	r = c.ok("webhooks", "create", "ci", "--url", rc.URL, "--event", "job.queued,job.cancelled")
	secret := strings.TrimSpace(r.Stdout)
	if !strings.HasPrefix(secret, "whsec_") || strings.Count(r.Stdout, "\n") != 1 {
		t.Fatalf("create printed %q", r.Stdout)
	}
	mustContain(t, "create's note", r.Stderr, "created webhook subscription ci", "shown only once")
	rc.SetSecret(secret)
	c.secrets = append(c.secrets, secret)

	// Mistakes are the API's 422, naming the field: exit 1.
	r = c.want(1, "webhooks", "create", "bad", "--url", rc.URL, "--event", "job.exploded")
	mustContain(t, "unknown event", r.Stderr, `field "events[0]": unknown event "job.exploded"`)
	r = c.want(1, "webhooks", "create", "bad", "--url", "ftp://x.example/", "--event", "*")
	mustContain(t, "bad url", r.Stderr, `field "url"`)
	c.want(2, "webhooks", "create", "bad", "--event", "*")
	c.want(2, "webhooks", "create", "bad", "--url", rc.URL)
	c.want(3, "webhooks", "show", "nope")

	id := o.Submit(map[string]any{"model_type": "lora"}, nil)
	if code, _ := o.Do("POST", "/api/queue/"+id+"/cancel", nil); code != 200 {
		t.Fatal("cancel")
	}
	rc.WaitAccepted(2, 30*time.Second)
	Eventually(t, 30*time.Second, "both recorded delivered", func() bool {
		return strings.Count(c.ok("webhooks", "deliveries", "ci", "--state", "delivered").Stdout, "delivered") == 2
	})

	r = c.ok("webhooks", "list")
	mustContain(t, "list", r.Stdout, "NAME", "ci", "http://127.0.0.1", "job.cancelled,job", "json")
	mustContain(t, "list -o wide", c.ok("webhooks", "list", "-o", "wide").Stdout, "job.cancelled,job.queued", rc.URL)
	r = c.ok("webhooks", "show", "ci")
	mustContain(t, "show", r.Stdout, "Name:", "ci", rc.URL, "0 pending, 0 failed", "job.queued", "job.cancelled", "delivered")
	r = c.ok("webhooks", "deliveries", "ci", "-o", "json", "--payload")
	var log struct {
		Deliveries []struct {
			Event   string          `json:"event"`
			State   string          `json:"state"`
			Payload json.RawMessage `json:"payload"`
		} `json:"deliveries"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &log); err != nil || len(log.Deliveries) != 2 || log.Deliveries[0].Event != "job.cancelled" ||
		!strings.Contains(string(log.Deliveries[0].Payload), id) {
		t.Fatalf("deliveries -o json: %v\n%s", err, r.Stdout)
	}
	r = c.ok("webhooks", "delete", "ci")
	mustContain(t, "delete", r.Stdout, "webhook subscription ci", "deleted")
	mustContain(t, "list after delete", c.ok("webhooks", "list").Stdout, "no webhook subscriptions")
}
