package integration

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/gpu"
	"github.com/simpletuner/simpletuner-orchestration/internal/gpu/gpumock"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
	"github.com/simpletuner/simpletuner-orchestration/internal/worker"
)

// withMockGPUs gives the worker a mock machine of NVIDIA GPUs, watched every
// 50 ms.
func withMockGPUs(m *gpumock.Machine) func(*worker.Options) {
	return func(o *worker.Options) {
		o.GPU = gpu.NewNVMLFrom(m, o.Logger)
		o.GPUWatchInterval = 50 * time.Millisecond
		o.Timers.GPUSettle = 200 * time.Millisecond
	}
}

// gpusOf lists the GPU indexes an attempt held.
func gpusOf(a map[string]any) []int {
	var out []int
	list, _ := a["gpus"].([]any)
	for _, g := range list {
		out = append(out, int(g.(float64)))
	}
	return out
}

// condition is the state of GPU i in the worker's view ("" when usable).
func condition(o *orch, workerID string, i int) (state string, clearing bool) {
	_, w := o.API("GET", "/api/admin/workers/"+workerID, nil)
	list, _ := w["gpu_conditions"].([]any)
	for _, c := range list {
		c := c.(map[string]any)
		if int(c["index"].(float64)) == i {
			return c["state"].(string), c["clearing"] == true
		}
	}
	return "", false
}

// An XID that blames the hardware fences that GPU only: the job on it is
// stopped and requeued without spending a retry, runs again on the GPUs
// left, and the fenced GPU gets no job until an admin clears it. An XID
// that is the job's own goes into its record, not against the GPU.
func TestGPUFaultFencesOneGPU(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func(*testing.T) store.Store) {
		o := startOrch(t, open(t), fastOptions(t), "")
		id, token := o.createWorker("w")
		m := gpumock.New(2)
		w := startWorker(t, o.URL, token, withMockGPUs(m))
		o.connected(id)

		job := o.submit(map[string]any{"steps": 400, "step_seconds": 0.05})
		testutil.Eventually(t, 30*time.Second, "the job running on both GPUs", func() bool {
			j := o.job(job)
			at := attempts(j)
			return j["status"] == "running" && len(at) == 1 && slices.Equal(gpusOf(at[0]), []int{0, 1})
		})

		m.XID(1, 79)
		// On a loaded machine a dispatch can be withdrawn when the stream
		// stalls; such an attempt never started and spends no retry.
		testutil.Eventually(t, 30*time.Second, "the job requeued and running again on GPU 0", func() bool {
			j := o.job(job)
			at := attempts(j)
			if len(at) < 2 || at[0]["outcome"] != "gpu_fault" || j["status"] != "running" {
				return false
			}
			for _, between := range at[1 : len(at)-1] {
				if between["outcome"] != "withdrawn" {
					t.Fatalf("an attempt between the fault and the rerun ended %v, want withdrawn: %v", between["outcome"], at)
				}
			}
			return slices.Equal(gpusOf(at[len(at)-1]), []int{0})
		})
		j := o.job(job)
		if j["retries_used"] != float64(0) || !strings.Contains(attempts(j)[0]["error"].(string), "XID 79 (fell off the bus)") {
			t.Fatalf("after the fault: retries_used %v, attempt 1 error %v", j["retries_used"], attempts(j)[0]["error"])
		}
		if st, _ := condition(o, id, 1); st != "unhealthy" {
			t.Fatalf("GPU 1 is %q, want unhealthy", st)
		}
		fences, err := os.ReadFile(filepath.Join(w.stateDir, "gpu-health.json"))
		if err != nil || !strings.Contains(string(fences), "XID 79") {
			t.Fatalf("the fence is not kept on disk: %s %v", fences, err)
		}

		// The job's own error: recorded with the attempt, GPU 0 stays usable.
		m.XID(0, 13)
		testutil.Eventually(t, 30*time.Second, "the job's log naming XID 13", func() bool {
			_, logs := o.jobLog(job)
			return strings.Contains(logs, "XID 13 (graphics engine exception) on GPU 0")
		})
		if st, _ := condition(o, id, 0); st != "" {
			t.Fatalf("an application XID marked GPU 0 %q", st)
		}
		o.API("POST", "/api/queue/"+job+"/cancel", nil)
		testutil.Eventually(t, 30*time.Second, "the job cancelled", func() bool { return o.job(job)["status"] == "cancelled" })
		if ev := attempts(o.job(job))[1]["gpu_events"]; ev == nil || !strings.Contains(ev.([]any)[0].(string), "XID 13") {
			t.Fatalf("attempt 2's gpu_events: %v", ev)
		}

		// A two-GPU job waits while GPU 1 is fenced; an admin clears it.
		two := o.submit(map[string]any{"steps": 1, "step_seconds": 0.01, "--num_processes": 2})
		testutil.Eventually(t, 30*time.Second, "the two-GPU job waiting for GPUs", func() bool {
			return o.job(two)["waiting_reason"] == "gpus_busy"
		})
		if code, r := o.API("POST", "/api/admin/workers/"+id+"/gpus/0/clear", nil); code != 409 {
			t.Fatalf("clearing a healthy GPU: %d %v", code, r)
		}
		if code, r := o.API("POST", "/api/admin/workers/"+id+"/gpus/1/clear", nil); code != 200 || r["status"] != "clearing" {
			t.Fatalf("clearing GPU 1: %d %v", code, r)
		}
		testutil.Eventually(t, 30*time.Second, "the two-GPU job completed once GPU 1 is back", func() bool {
			return o.job(two)["status"] == "completed"
		})
		if st, clearing := condition(o, id, 1); st != "" || clearing {
			t.Fatalf("GPU 1 after the clear: %q clearing %v", st, clearing)
		}
		if audited := o.auditActions(); !slices.Contains(audited, "worker.gpu_clear") || !slices.Contains(audited, "worker.gpus") {
			t.Fatalf("audit records: %v", audited)
		}
	})
}

// New uncorrectable ECC errors fence the GPU, found by the periodic health
// check; so does a GPU that falls off the bus without an event.
func TestGPUHealthCheckFences(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func(*testing.T) store.Store) {
		o := startOrch(t, open(t), fastOptions(t), "")
		id, token := o.createWorker("w")
		m := gpumock.New(3)
		startWorker(t, o.URL, token, withMockGPUs(m))
		o.connected(id)
		m.AddECC(0, 2)
		m.Lose(2)
		testutil.Eventually(t, 30*time.Second, "GPUs 0 and 2 fenced", func() bool {
			a, _ := condition(o, id, 0)
			b, _ := condition(o, id, 2)
			return a == "unhealthy" && b == "unhealthy"
		})
		// A job without a GPU count takes the whole worker: the one GPU left.
		job := o.submit(map[string]any{"steps": 1, "step_seconds": 0.01})
		testutil.Eventually(t, 30*time.Second, "the job completed", func() bool { return o.job(job)["status"] == "completed" })
		if g := gpusOf(attempts(o.job(job))[0]); !slices.Equal(g, []int{1}) {
			t.Fatalf("the whole-worker job held %v, want [1]", g)
		}
	})
}

// A GPU an ended job left a process on is held back (never given to the
// next job while dirty), and released once nothing is left on it.
func TestGPUHygieneHoldsADirtyGPU(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func(*testing.T) store.Store) {
		o := startOrch(t, open(t), fastOptions(t), "")
		id, token := o.createWorker("w")
		m := gpumock.New(1)
		w := startWorker(t, o.URL, token, withMockGPUs(m))
		o.connected(id)

		first := o.submit(map[string]any{"steps": 20, "step_seconds": 0.05})
		pid := trainerPID(t, w, first)
		// A process outside the job's walls (here: the test itself) sits on
		// the GPU beside the trainer.
		m.SetProcesses(0, map[int]uint64{pid: 3 << 30, os.Getpid(): 1002 << 20})
		testutil.Eventually(t, 30*time.Second, "the first job completed", func() bool { return o.job(first)["status"] == "completed" })
		m.SetProcesses(0, map[int]uint64{os.Getpid(): 1002 << 20})
		// The hold reaches the orchestrator with a heartbeat. workerd holds
		// the GPUs before its terminal report, except when its stream is
		// re-established at that moment: the report then goes first, since
		// the registration must not find the attempt unaccounted for.
		testutil.Eventually(t, 30*time.Second, "GPU 0 held after the job with a leftover process", func() bool {
			st, _ := condition(o, id, 0)
			return st == "held"
		})
		_, wk := o.API("GET", "/api/admin/workers/"+id, nil)
		reason := wk["gpu_conditions"].([]any)[0].(map[string]any)["reason"].(string)
		if want := "pid " + strconv.Itoa(os.Getpid()) + " uid 0"; !strings.Contains(reason, want) || !strings.Contains(reason, "1,002 MiB") {
			t.Errorf("the hold's reason %q does not name %q and 1,002 MiB", reason, want)
		}
		if a := attempts(o.job(first))[0]; a["peak_gpu_memory_bytes"] != float64(3<<30) {
			t.Errorf("peak GPU memory of the job's own processes: %v, want %d (attempt %v)", a["peak_gpu_memory_bytes"], 3<<30, a)
		}

		second := o.submit(map[string]any{"steps": 1, "step_seconds": 0.01})
		testutil.Eventually(t, 30*time.Second, "the second job waiting", func() bool { return o.job(second)["waiting_reason"] == "gpus_busy" })
		if o.job(second)["status"] != "queued" {
			t.Fatalf("a job was given the dirty GPU")
		}
		m.SetProcesses(0, nil)
		testutil.Eventually(t, 30*time.Second, "the second job completed once the GPU is clean", func() bool {
			return o.job(second)["status"] == "completed"
		})
		if st, _ := condition(o, id, 0); st != "" {
			t.Fatalf("GPU 0 still %q", st)
		}
	})
}

// Each attempt's GPU use is measured and shown: GPU-seconds, mean
// utilisation; /metrics carries each GPU's numbers and each worker's sum.
func TestGPUAccounting(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func(*testing.T) store.Store) {
		o := startOrch(t, open(t), fastOptions(t), "")
		id, token := o.createWorker("w")
		m := gpumock.New(2)
		m.SetUse(0, 80, 10<<30)
		m.SetUse(1, 60, 10<<30)
		startWorker(t, o.URL, token, withMockGPUs(m))
		o.connected(id)
		job := o.submit(map[string]any{"steps": 10, "step_seconds": 0.05})
		testutil.Eventually(t, 30*time.Second, "the job completed", func() bool { return o.job(job)["status"] == "completed" })
		// The attempt that ran: under load a stream can go quiet before the
		// job starts, and the job then completes on a later attempt.
		at := attempts(o.job(job))
		a := at[len(at)-1]
		secs, _ := a["gpu_seconds"].(float64)
		util, _ := a["gpu_utilization_pct"].(float64)
		// Ten steps of 50 ms: at least nine sleeps, however loaded the machine.
		if secs < 2*0.45 || secs > 2*30 || util != 70 {
			t.Fatalf("attempt usage: gpu_seconds %v (2 GPUs for about half a second), gpu_utilization_pct %v (want 70)", a["gpu_seconds"], a["gpu_utilization_pct"])
		}
		// The sum is counted once the report was applied, just after the
		// job shows completed.
		sum := `simpletuner_worker_gpu_seconds_total{worker="` + id + `",name="w"}`
		testutil.Eventually(t, 30*time.Second, "the worker's GPU-seconds in /metrics", func() bool { return strings.Contains(o.metrics(), sum) })
		metrics := o.metrics()
		for _, want := range []string{
			`simpletuner_gpu_utilization_percent{worker="` + id + `",name="w",index="0",uuid="` + m.UUID(0) + `"} 80`,
			`simpletuner_gpu_power_watts{worker="` + id + `"`,
			`simpletuner_gpu_healthy{worker="` + id + `",name="w",index="1",uuid="` + m.UUID(1) + `"} 1`,
		} {
			if !strings.Contains(metrics, want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
	})
}

// trainerPID waits for the demo trainer of a job to write its pid.
func trainerPID(t *testing.T, w *runningWorker, jobID string) int {
	t.Helper()
	pid := 0
	testutil.Eventually(t, 30*time.Second, "the trainer's pid", func() bool {
		b, err := os.ReadFile(filepath.Join(w.stateDir, "jobs", jobID, "pids.txt"))
		if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
			pid, _ = strconv.Atoi(f[0])
		}
		return pid > 0
	})
	return pid
}

// metrics reads the orchestrator's /metrics.
func (o *orch) metrics() string {
	o.t.Helper()
	srv := httptest.NewServer(o.srv.MetricsHandler())
	defer srv.Close()
	res, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		o.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return string(b)
}

// jobLog reads a job's log: the status code and the body.
func (o *orch) jobLog(jobID string) (int, string) {
	o.t.Helper()
	req, _ := http.NewRequest("GET", o.URL+"/api/queue/"+jobID+"/logs", nil)
	req.Header.Set("Authorization", "Bearer "+o.Admin)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		o.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// auditActions lists the actions of the audit log, oldest first.
func (o *orch) auditActions() []string {
	o.t.Helper()
	recs, err := o.st.ListAudit(o.t.Context(), 0, 10000)
	if err != nil {
		o.t.Fatal(err)
	}
	var out []string
	for _, r := range recs {
		out = append(out, r.Action)
	}
	return out
}
