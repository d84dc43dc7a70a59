package e2e

import (
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/webhook/spec"
	. "github.com/simpletuner/simpletuner-orchestration/test/e2e/e2etest"
)

var jobLife = []string{spec.JobQueued, spec.JobStarted, spec.JobCompleted}

// A job run by a real workerd: every event of its life reaches the
// subscriber once, signed, in order.
func TestWebhookJobLife(t *testing.T) {
	t.Parallel()
	o := StartOrchestratorWith(t, OrchOptions{ExtraTOML: WebhookTOML, Metrics: true})
	rc := StartReceiver(t, "")
	o.Subscribe(rc, "all", "*")
	o.StartWorker(WorkerSpec{Name: "w1", Persistent: true})
	id := o.Submit(map[string]any{"steps": 3, "step_seconds": 0.05}, nil)
	o.WaitJob(id, "completed", 30*time.Second)
	hooks := rc.WaitAccepted(len(jobLife), 30*time.Second)
	OnceEach(t, hooks)
	if got := ByJob(hooks)[id]; !slices.Equal(got, jobLife) {
		t.Fatalf("events %v, want %v", got, jobLife)
	}
	done := hooks[2].Payload.Job
	if done.SubmittedBy == "" || done.Team != "default" || done.Attempt != 1 || done.WorkerID == "" ||
		done.StartedAt == "" || done.EndedAt == "" || done.Outcome != "completed" || done.Links.Artifacts != "/api/queue/"+id+"/artifacts" {
		t.Fatalf("completed: %+v", done)
	}
	Eventually(t, 30*time.Second, "deliveries counted", func() bool { return o.Metric("simpletuner_webhook_deliveries_total") >= 3 })
}

// The orchestrator is killed (SIGKILL) with an event committed and its
// request under way: after the restart the event arrives, with the same ID.
func TestWebhookSurvivesKill9InFlight(t *testing.T) {
	t.Parallel()
	o := StartOrchestratorWith(t, OrchOptions{ExtraTOML: WebhookTOML})
	rc := StartReceiver(t, "")
	held := make(chan string, 1)
	var once sync.Once
	rc.Hold(func(r *http.Request) {
		first := false
		once.Do(func() { first = true })
		if first {
			held <- r.Header.Get("X-SimpleTuner-Event-Id")
			<-r.Context().Done() // until the sender is gone
		}
	})
	o.Subscribe(rc, "all", "job.queued")
	id := o.Submit(map[string]any{"model_type": "lora"}, nil)
	eventID := <-held
	o.P.Kill9()
	o.Restart()
	hooks := rc.WaitAccepted(1, 60*time.Second)
	if hooks[0].EventID != eventID || hooks[0].Payload.Job.ID != id {
		t.Fatalf("after the restart: event %s of job %s, want %s of %s", hooks[0].EventID, hooks[0].Payload.Job.ID, eventID, id)
	}
	OnceEach(t, rc.All())
}

// Events committed while the receiver is down survive a SIGKILL of the
// orchestrator: after the restart and the receiver's return, each arrives,
// with the ID the delivery log gave it before the kill, in order per job.
func TestWebhookSurvivesKill9Pending(t *testing.T) {
	t.Parallel()
	o := StartOrchestratorWith(t, OrchOptions{ExtraTOML: WebhookTOML})
	rc := StartReceiver(t, "")
	addr := strings.TrimPrefix(strings.TrimSuffix(rc.URL, "/hook"), "http://")
	o.Subscribe(rc, "all", "job.*")
	rc.Close() // down: connections refused
	var jobs []string
	for range 3 {
		id := o.Submit(map[string]any{"model_type": "lora"}, nil)
		if code, m := o.Do("POST", "/api/queue/"+id+"/cancel", nil); code != 200 {
			t.Fatalf("cancel: %d %v", code, m)
		}
		jobs = append(jobs, id)
	}
	var before []map[string]any
	Eventually(t, 30*time.Second, "every head tried and refused", func() bool {
		before = o.Deliveries("all")
		tried := 0
		for _, d := range before {
			if d["attempts"].(float64) > 0 && strings.Contains(d["last_error"].(string), "refused") {
				tried++
			}
		}
		return len(before) == 6 && tried >= 3
	})
	want := map[string]bool{}
	for _, d := range before {
		want[d["event_id"].(string)] = true
	}
	o.P.Kill9()
	back := StartReceiver(t, addr)
	back.SetSecret(rc.Secret)
	o.Restart()
	hooks := back.WaitAccepted(6, 60*time.Second)
	OnceEach(t, hooks)
	for _, h := range hooks {
		if !want[h.EventID] {
			t.Fatalf("event %s (%s) was not in the delivery log before the kill", h.EventID, h.Event)
		}
	}
	for _, id := range jobs {
		if got := ByJob(hooks)[id]; !slices.Equal(got, []string{spec.JobQueued, spec.JobCancelled}) {
			t.Fatalf("job %s: %v", id, got)
		}
	}
}

// Two orchestrators on one PostgreSQL database deliver the outbox together:
// no event, and no two events of one job, are ever sent at once, and each
// event is accepted once.
func TestWebhookTwoReplicas(t *testing.T) {
	t.Parallel()
	pg := StartPG(t)
	opt := OrchOptions{DBURL: pg.URL, ExtraTOML: WebhookTOML}
	a := StartOrchestratorWith(t, opt)
	b := StartOrchestratorWith(t, opt)
	rc := StartReceiver(t, "")
	rc.Hold(func(*http.Request) { time.Sleep(5 * time.Millisecond) }) // a window for the other replica
	a.Subscribe(rc, "all", "job.*")
	var jobs []string
	for i := range 12 {
		o := []*Orch{a, b}[i%2]
		id := o.Submit(map[string]any{"model_type": "lora"}, nil)
		if code, m := []*Orch{b, a}[i%2].Do("POST", "/api/queue/"+id+"/cancel", nil); code != 200 {
			t.Fatalf("cancel: %d %v", code, m)
		}
		jobs = append(jobs, id)
	}
	hooks := rc.WaitAccepted(2*len(jobs), 60*time.Second)
	OnceEach(t, hooks)
	if ov := rc.Overlaps(); len(ov) > 0 {
		t.Fatalf("sent twice at once: %v", ov)
	}
	for _, id := range jobs {
		if got := ByJob(hooks)[id]; !slices.Equal(got, []string{spec.JobQueued, spec.JobCancelled}) {
			t.Fatalf("job %s: %v", id, got)
		}
	}
}

// A subscription in orchestratord.toml is stored at start, signed with the
// secret from its file, and read-only through the API.
func TestWebhookFromConfig(t *testing.T) {
	t.Parallel()
	rc := StartReceiver(t, "")
	secret := "cfg-secret-" + strings.Repeat("x", 16)
	rc.SetSecret(secret)
	dir := t.TempDir()
	file := dir + "/hook.secret"
	if err := os.WriteFile(file, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := StartOrchestratorWith(t, OrchOptions{ExtraTOML: WebhookTOML + fmt.Sprintf(`
[[webhooks]]
name = "from-file"
url = %q
events = ["job.queued"]
format = "slack"
secret_file = %q
`, rc.URL, file)})
	id := o.Submit(map[string]any{"model_type": "lora"}, nil)
	hooks := rc.WaitAccepted(1, 30*time.Second)
	if !strings.Contains(string(hooks[0].Body), `"text":":inbox_tray: Job `+id) {
		t.Fatalf("slack body %s", hooks[0].Body)
	}
	if code, _ := o.Do("DELETE", "/api/admin/webhooks/from-file", nil); code != http.StatusConflict {
		t.Fatalf("deleting a [[webhooks]] entry: HTTP %d", code)
	}
}
