package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/simpletuner/simpletuner-orchestration/test/e2e/e2etest"
)

// gpuJob trains for about seconds on gpus GPUs.
func gpuJob(gpus int, seconds float64) (map[string]any, map[string]any) {
	return slowJob(seconds), map[string]any{"gpu_count": gpus}
}

// visibleOf waits for a job to write the GPUs it was shown.
func visibleOf(t *testing.T, w *Wrk, jobID string) string {
	t.Helper()
	file := filepath.Join(w.Dir, "state", "jobs", jobID, "visible.txt")
	var got string
	Eventually(t, 20*time.Second, "the GPUs "+jobID+" sees", func() bool {
		b, err := os.ReadFile(file)
		got = strings.TrimSpace(string(b))
		return err == nil && got != ""
	})
	return got
}

// startFourOneGPUJobs submits four 1-GPU jobs of about seconds each and
// waits until all four run at once.
func startFourOneGPUJobs(t *testing.T, o *Orch, h *History, seconds float64) []string {
	t.Helper()
	var ids []string
	for range 4 {
		_, id := h.Submit(gpuJob(1, seconds))
		ids = append(ids, id)
	}
	Eventually(t, 20*time.Second, "four 1-GPU jobs running at once", func() bool {
		for _, id := range ids {
			if o.Job(id)["status"] != "running" {
				return false
			}
		}
		return true
	})
	return ids
}

// One workerd with four GPUs runs four 1-GPU jobs at once, each shown only
// its own GPU; a 4-GPU job then waits for all four; kill -9 of the
// orchestrator loses none of four running attempts; kill -9 of the workerd
// requeues every attempt it held and leaks no GPU.
func TestFourJobsOnFourGPUs(t *testing.T) {
	t.Parallel()
	// The worker must ride out the orchestrator's restart, however long a
	// loaded machine makes it: its self-fence (4 s, kept below the announced
	// 6 s heartbeat timeout) outlasts it.
	o := StartOrchestratorWith(t, OrchOptions{HeartbeatTimeout: "6s"})
	h := NewHistory(t, o)
	script := `echo "$CUDA_VISIBLE_DEVICES" > visible.txt; exec ` + DemoTrainer()
	w := o.StartWorker(WorkerSpec{Name: "quad", Persistent: true, StaticGPUs: 4, SelfFenceAfter: "4s",
		Command: []string{"/bin/sh", "-c", script}})

	small := startFourOneGPUJobs(t, o, h, 3)
	var seen []string
	for _, id := range small {
		v := visibleOf(t, w, id)
		if strings.Contains(v, ",") || !strings.HasPrefix(v, "GPU-quad-") {
			t.Errorf("%s sees %q, want one GPU of its own", id, v)
		}
		seen = append(seen, v)
	}
	slices.Sort(seen)
	if len(slices.Compact(seen)) != 4 {
		t.Errorf("four jobs saw %v, want four different GPUs", seen)
	}
	wk := o.Worker(w.ID)
	if wk["status"] != "busy" || wk["gpus_free"] != float64(0) || wk["running_jobs"] != float64(4) {
		t.Errorf("worker running four 1-GPU jobs: status %v gpus_free %v running_jobs %v", wk["status"], wk["gpus_free"], wk["running_jobs"])
	}

	// The 4-GPU job waits for the four to end, then gets all four GPUs.
	_, big := h.Submit(gpuJob(4, 0.5))
	if j := o.Job(big); j["status"] == "queued" && j["waiting_reason"] != "gpus_busy" {
		t.Errorf("a 4-GPU job behind four running ones waits for %v (%v), want gpus_busy", j["waiting_reason"], j["waiting_detail"])
	}
	o.WaitJob(big, "completed", 30*time.Second)
	for _, id := range small {
		if st := o.Job(id)["status"]; st != "completed" {
			t.Errorf("%s is %v", id, st)
		}
	}
	if v := visibleOf(t, w, big); strings.Count(v, ",") != 3 {
		t.Errorf("the 4-GPU job sees %q", v)
	}

	// kill -9 with four attempts out: each is requeued once, and the worker's
	// GPUs are all free again.
	held := startFourOneGPUJobs(t, o, h, 30)
	// kill -9 of the orchestrator: the worker's registration lists all four
	// attempts and the restarted orchestrator resumes every one.
	o.P.Kill9()
	o.Restart()
	Eventually(t, 20*time.Second, "the worker back with its four attempts", func() bool {
		wk := o.Worker(w.ID)
		return wk["connected"] == true && wk["running_jobs"] == float64(4)
	})
	for _, id := range held {
		if j := o.Job(id); j["status"] != "running" || j["retries_used"] != float64(0) {
			t.Errorf("after the orchestrator restart %s is %v with retries_used %v, want running with none", id, j["status"], j["retries_used"])
		}
	}

	w.P.Kill9()
	Eventually(t, 20*time.Second, "every attempt of the killed worker requeued", func() bool {
		for _, id := range held {
			if j := o.Job(id); j["status"] != "queued" || j["retries_used"] != float64(1) {
				return false
			}
		}
		return true
	})
	wk = o.Worker(w.ID)
	if wk["gpus_free"] != float64(4) || wk["running_jobs"] != float64(0) {
		t.Errorf("the killed worker still holds GPUs: gpus_free %v running_jobs %v", wk["gpus_free"], wk["running_jobs"])
	}
	for _, id := range held {
		o.Do("POST", "/api/queue/"+id+"/cancel", nil)
	}
	h.WaitAllTerminal(30 * time.Second)
	h.Finish()
	sum := h.Check(Expect{MaxRequeues: 4})
	t.Logf("RESULT %s: %s", t.Name(), sum)
}

// A job submitted as SimpleTuner's documentation shows, with no gpu_count,
// reaches the worker's GPUs: without a process count in its config it is
// shown every GPU and runs alone; with --num_processes it is shown that
// many; gpu_count 0 is shown none, and its log says so first.
func TestDocumentedSubmitReachesTheGPUs(t *testing.T) {
	t.Parallel()
	o := StartOrchestrator(t, "")
	script := `echo "$CUDA_VISIBLE_DEVICES" > visible.txt; echo "visible: [$CUDA_VISIBLE_DEVICES]"; exec ` + DemoTrainer()
	w := o.StartWorker(WorkerSpec{Name: "pair", Persistent: true, StaticGPUs: 2, Command: []string{"/bin/sh", "-c", script}})

	whole := o.Submit(map[string]any{"model_type": "lora", "steps": 3, "step_seconds": 0.1}, nil)
	if j := o.Job(whole); j["gpu_allocation"] != "whole worker" {
		t.Fatalf("a job without gpu_count gets %v", j["gpu_allocation"])
	}
	o.WaitJob(whole, "completed", 30*time.Second)
	if v := visibleOf(t, w, whole); v != "GPU-pair-0,GPU-pair-1" {
		t.Errorf("the whole-worker job sees %q, want both GPUs", v)
	}

	one := o.Submit(map[string]any{"model_type": "lora", "--num_processes": 1, "steps": 3, "step_seconds": 0.1}, nil)
	o.WaitJob(one, "completed", 30*time.Second)
	if v := visibleOf(t, w, one); strings.Contains(v, ",") || !strings.HasPrefix(v, "GPU-pair-") {
		t.Errorf("the job with --num_processes 1 sees %q, want one GPU", v)
	}

	cpu := o.Submit(map[string]any{"model_type": "lora", "steps": 1, "step_seconds": 0.1}, map[string]any{"gpu_count": 0})
	o.WaitJob(cpu, "completed", 30*time.Second)
	log := o.Logs(cpu)
	if first, _, _ := strings.Cut(log, "\n"); !strings.Contains(first, "no GPU") || !strings.Contains(first, "CPU only") {
		t.Errorf("the CPU-only job's log starts with %q", first)
	}
	if !strings.Contains(log, "visible: []") {
		t.Errorf("the CPU-only job was shown GPUs:\n%s", log)
	}
}
