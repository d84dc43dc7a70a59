package browser

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	. "github.com/simpletuner/simpletuner-orchestration/test/e2e/e2etest"
)

// A worker that runs several jobs at once: its row says which job holds
// which GPU, the queue names the worker and shows each job's team and
// GPUs, and the job's page names the GPUs its attempt holds.
func TestSharedWorkerInABrowser(t *testing.T) {
	o := StartOrchestrator(t, "")
	w := o.StartWorker(WorkerSpec{Name: "quad-gpu", Persistent: true, StaticGPUs: 4, MaxJobs: 4})
	long := map[string]any{"model_type": "lora", "steps": 600, "step_seconds": 0.1}
	one := o.Submit(long, map[string]any{"gpu_count": 1})
	two := o.Submit(long, map[string]any{"gpu_count": 2})
	o.WaitJob(one, "running", 30*time.Second)
	o.WaitJob(two, "running", 30*time.Second)

	b := newTab(t, o.URL, 1280, 900)
	b.open("/ui/signin")
	b.run(chromedp.SendKeys(css(`#token`), o.Admin), chromedp.Submit(css(`#token`)),
		chromedp.WaitVisible(css(`[data-count="workers-total"]`)))
	b.open("/ui/workers")
	row := `tr[data-worker="` + w.ID + `"]`
	b.waitText(row+` [data-label="Jobs"]`, two, 15*time.Second)
	held := b.text(row + ` [data-label="Jobs"]`)
	if !strings.Contains(held, one+" on GPU #") || !strings.Contains(held, two+" on GPUs #") {
		t.Fatalf("the worker's row does not say which job holds which GPU: %q", held)
	}
	b.shot("workers-shared")

	b.open("/ui/queue")
	b.run(chromedp.WaitVisible(css(`#queue-live`)))
	jobRow := `tr[data-job="` + two + `"]`
	if got := b.text(jobRow + ` [data-label="Worker"]`); !strings.Contains(got, "quad-gpu") {
		t.Fatalf("the queue shows the worker as %q, not by name", got)
	}
	if got := b.text(jobRow + ` [data-label="Team"]`); got != "default" {
		t.Fatalf("team column: %q", got)
	}
	if got := b.text(jobRow + ` [data-label="GPUs"]`); !strings.Contains(got, "2 GPUs") {
		t.Fatalf("GPU column: %q", got)
	}
	b.shot("queue-shared")

	b.open("/ui/jobs/" + two)
	b.waitText(`.timeline`, "GPUs #", 10*time.Second)
	b.noProblems()
}
