package faults

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/webhook/spec"
	. "github.com/simpletuner/simpletuner-orchestration/test/e2e/e2etest"
)

// The receiver is down (503) for an outage while jobs run on a real
// workerd; then it is up, and every event arrives once, signed, in order per
// job. The full suite's outage is a minute with the default back-off (1 s
// doubling to 10 min, capped here at 10 s so the test ends); the fast
// subset's two seconds with a back-off of milliseconds.
func TestWebhookReceiverDown(t *testing.T) {
	t.Parallel()
	outage, delivery := 2*time.Second, WebhookTOML
	if isFull() {
		outage = time.Minute
		delivery = "[webhook_delivery]\nallow_local = true\nbackoff_max = \"10s\"\n"
	}
	o := StartOrchestratorWith(t, OrchOptions{ExtraTOML: delivery})
	rc := StartReceiver(t, "")
	rc.Answer(func(Hook) int { return http.StatusServiceUnavailable })
	o.Subscribe(rc, "jobs", "job.*")
	o.StartWorker(WorkerSpec{Name: "w0", Persistent: true})
	start := time.Now()
	var jobs []string
	for range 4 {
		jobs = append(jobs, o.Submit(trainFor(0.3), nil))
	}
	for _, id := range jobs {
		o.WaitJob(id, "completed", 60*time.Second)
	}
	Eventually(t, 60*time.Second, "each job's first event refused", func() bool { return len(rc.All()) >= len(jobs) })
	time.Sleep(time.Until(start.Add(outage)))                 // the outage itself, whatever the jobs took
	rc.Answer(func(Hook) int { return http.StatusNoContent }) // up again
	hooks := rc.WaitAccepted(3*len(jobs), 2*time.Minute)
	OnceEach(t, hooks)
	for _, id := range jobs {
		if got := ByJob(hooks)[id]; !slices.Equal(got, []string{spec.JobQueued, spec.JobStarted, spec.JobCompleted}) {
			t.Fatalf("job %s: %v", id, got)
		}
	}
	t.Logf("%d requests for %d events after a %s outage", len(rc.All()), len(hooks), outage)
}

// A receiver that holds every request (30 s each in the full suite, until
// the test ends in the fast subset) takes all the delivery's request slots;
// jobs are dispatched and run as ever meanwhile.
func TestWebhookSlowReceiverDoesNotHoldJobs(t *testing.T) {
	t.Parallel()
	o := StartOrchestratorWith(t, OrchOptions{ExtraTOML: "[webhook_delivery]\nallow_local = true\ntimeout = \"60s\"\n"})
	rc := StartReceiver(t, "")
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	rc.Hold(func(r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		case <-time.After(30 * time.Second):
		}
	})
	o.Subscribe(rc, "slow", "*")
	o.StartWorker(WorkerSpec{Name: "w0", Persistent: true})
	n := 10
	if isFull() {
		n = 40
	}
	// Eight jobs: eight first events, each of its own job, fill the eight
	// request slots (a job's next event waits for its first).
	for range 8 {
		o.Submit(trainFor(0.1), nil)
	}
	Eventually(t, 60*time.Second, "every request slot held by the slow receiver", func() bool { return rc.Held() >= 8 })
	start := time.Now()
	for range n {
		id := o.Submit(trainFor(0.1), nil)
		o.WaitJob(id, "completed", 30*time.Second)
	}
	if held := rc.Held(); held < 8 && !isFull() {
		t.Fatalf("only %d requests held while the jobs ran", held)
	}
	t.Logf("%d jobs ran one after another in %s with %d webhook requests held", n, time.Since(start).Round(time.Millisecond), rc.Held())
}
