package integration

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/artifacts"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
	"github.com/simpletuner/simpletuner-orchestration/internal/worker"
)

// withArtifacts gives the orchestrator artifact storage on the local disk.
func (o *orch) withArtifacts() {
	o.t.Helper()
	b, err := artifacts.NewLocal(filepath.Join(o.t.TempDir(), "artifacts"))
	if err != nil {
		o.t.Fatal(err)
	}
	// Not closed: the orchestrator, stopped by a later cleanup, may still
	// read it (its temporary directory goes with the test).
	o.srv.SetArtifacts(artifacts.New(b, artifacts.Limits{}))
}

func keepCheckpoints(opt *worker.Options) {
	opt.Checkpoints = worker.CheckpointSettings{Enabled: true, Keep: 2, Scan: 20 * time.Millisecond}
}

// logText returns the job's stored log.
func (o *orch) logText(jobID string) string {
	o.t.Helper()
	req, _ := http.NewRequest("GET", o.URL+"/api/queue/"+jobID+"/logs", nil)
	req.Header.Set("Authorization", "Bearer "+o.Admin)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		o.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return string(b)
}

// stopsOnDrain makes the worker stop its jobs at once when drained, as one
// whose drain_timeout passed: they are requeued.
func stopsOnDrain(opt *worker.Options) { opt.DrainTimeout = time.Millisecond }

var stepLine = regexp.MustCompile(`(?m)^step (\d+)/(\d+) `)

// drainedJob is a job that checkpoints every 5 steps and is still training
// when the test drains its worker: long enough (10 s) that a loaded machine,
// slow to keep its first checkpoints, does not see it finish first.
const drainedJobSteps = 200

func drainedJob() map[string]any {
	return map[string]any{"steps": drainedJobSteps, "step_seconds": 0.05, "checkpointing_steps": 5, "output_dir": "out"}
}

// The worker running a job stops (its job is requeued); the retry, on
// another worker, gets the newest checkpoint back and the trainer goes on
// from its step; what it trains again is only what attempt 1 trained past it.
func TestRetryResumesFromCheckpoint(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func(*testing.T) store.Store) {
		o := startOrch(t, open(t), fastOptions(t), "")
		o.withArtifacts()
		idA, tokenA := o.createWorker("a")
		a := startWorker(t, o.URL, tokenA, keepCheckpoints, stopsOnDrain)
		o.connected(idA)
		jobID := o.submit(drainedJob())
		var kept float64
		testutil.Eventually(t, 20*time.Second, "a checkpoint at step 10 or later kept", func() bool {
			cp, _ := o.job(jobID)["checkpoint"].(map[string]any)
			kept, _ = cp["step"].(float64)
			return kept >= 10
		})
		a.Drain()
		testutil.Eventually(t, 20*time.Second, "the job requeued", func() bool { return o.job(jobID)["status"] == "queued" })
		idB, tokenB := o.createWorker("b")
		startWorker(t, o.URL, tokenB, keepCheckpoints)
		o.connected(idB)
		testutil.Eventually(t, 60*time.Second, "the retry completed", func() bool { return o.job(jobID)["status"] == "completed" })

		j := o.job(jobID)
		cp := j["checkpoint"].(map[string]any)
		if at := attempts(j); len(at) != 2 || at[1]["worker_id"] != idB || cp["attempt"] != float64(2) || cp["name"] != fmt.Sprintf("checkpoint-%d", drainedJobSteps) {
			t.Fatalf("job: attempts %v, checkpoint %v", at, cp)
		}
		log := o.logText(jobID)
		m := regexp.MustCompile(`resumed from checkpoint-(\d+) at step (\d+)`).FindStringSubmatch(log)
		if m == nil || m[1] != m[2] || float64(atoi(m[1])) < kept {
			t.Fatalf("the retry did not resume from the newest kept checkpoint (step %v):\n%s", kept, log)
		}
		resumed := atoi(m[1])
		if !strings.Contains(log, "simpletuner-workerd: resuming from checkpoint-"+m[1]) {
			t.Errorf("no resume line from workerd:\n%s", log)
		}
		// Attempt 2 trains from the resumed step on; attempt 1's steps past it
		// are all that is trained twice.
		second := log[strings.Index(log, "resumed from"):]
		if first := stepLine.FindStringSubmatch(second); first == nil || atoi(first[1]) != resumed+1 {
			t.Errorf("the retry's first step: %v", first)
		}
		lastOfFirst := 0
		for _, sm := range stepLine.FindAllStringSubmatch(log[:strings.Index(log, "resumed from")], -1) {
			lastOfFirst = atoi(sm[1])
		}
		if n := len(stepLine.FindAllString(log, -1)); n != drainedJobSteps+lastOfFirst-resumed {
			t.Errorf("%d steps trained in all; attempt 1 reached %d and the retry resumed at %d", n, lastOfFirst, resumed)
		}
		// The outputs were uploaded with the completed end.
		_, arts := o.API("GET", "/api/queue/"+jobID+"/artifacts", nil)
		if !strings.Contains(fmt.Sprint(arts), "outputs/pytorch_lora_weights.safetensors") {
			t.Errorf("artifacts: %v", arts)
		}
	})
}

// A worker with checkpoints off starts a retry afresh, as before.
func TestWorkerWithCheckpointsOffStartsAfresh(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func(*testing.T) store.Store) {
		o := startOrch(t, open(t), fastOptions(t), "")
		o.withArtifacts()
		job2 := o.submit(drainedJob())
		idC, tokenC := o.createWorker("c")
		c := startWorker(t, o.URL, tokenC, keepCheckpoints, stopsOnDrain)
		o.connected(idC)
		testutil.Eventually(t, 20*time.Second, "a checkpoint kept", func() bool { return o.job(job2)["checkpoint"] != nil })
		c.Drain()
		testutil.Eventually(t, 20*time.Second, "the job requeued", func() bool { return o.job(job2)["status"] == "queued" })
		idD, tokenD := o.createWorker("d")
		startWorker(t, o.URL, tokenD)
		o.connected(idD)
		testutil.Eventually(t, 60*time.Second, "the retry completed", func() bool { return o.job(job2)["status"] == "completed" })
		if log := o.logText(job2); strings.Contains(log, "resumed from") || strings.Count(log, fmt.Sprintf("step 1/%d ", drainedJobSteps)) != 2 {
			t.Errorf("a worker with checkpoints off resumed:\n%s", log)
		}
	})
}

func atoi(s string) int {
	n := 0
	fmt.Sscan(s, &n)
	return n
}

// An output directory outside the job's directory keeps nothing, says so in
// the job's log, and the job trains as before.
func TestOutputDirOutsideTheJobKeepsNothing(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func(*testing.T) store.Store) {
		o := startOrch(t, open(t), fastOptions(t), "")
		o.withArtifacts()
		id, token := o.createWorker("w")
		startWorker(t, o.URL, token, keepCheckpoints)
		o.connected(id)
		outside := t.TempDir()
		jobID := o.submit(map[string]any{"steps": 6, "step_seconds": 0.02, "checkpointing_steps": 2, "output_dir": outside})
		testutil.Eventually(t, 20*time.Second, "the job completed", func() bool { return o.job(jobID)["status"] == "completed" })
		log := o.logText(jobID)
		if !strings.Contains(log, "simpletuner-workerd: checkpoints are not kept: the output directory is not inside the job's directory") ||
			!strings.Contains(log, "step 6/6") {
			t.Fatalf("job log:\n%s", log)
		}
		if j := o.job(jobID); j["checkpoint"] != nil {
			t.Fatalf("a checkpoint was kept: %v", j["checkpoint"])
		}
		_, arts := o.API("GET", "/api/queue/"+jobID+"/artifacts", nil)
		if l, _ := arts["artifacts"].([]any); len(l) != 0 {
			t.Fatalf("artifacts: %v", l)
		}
	})
}
