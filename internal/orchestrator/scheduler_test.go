package orchestrator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
)

// slotAgent is a protocol-2 worker with gpus GPUs that runs several jobs at
// once, heartbeating every attempt it holds.
type slotAgent struct {
	*agent
	running map[string]int // job → attempt, guarded by agent.mu
}

func (e *env) startSlotAgent(name string, gpus int) *slotAgent {
	e.t.Helper()
	id, token := e.CreateWorker(name, "persistent", nil)
	a := &slotAgent{agent: e.newAgent(id, token, 2), running: map[string]int{}}
	var devices []map[string]any
	for i := range gpus {
		devices = append(devices, map[string]any{"index": i, "uuid": fmt.Sprintf("GPU-%s-%d", name, i), "name": "H100", "memory_mib": 81559})
	}
	e.Must(a.register(map[string]any{"name": name, "capabilities": map[string]any{"max_jobs": gpus},
		"gpu_info": map[string]any{"name": "H100", "count": gpus, "vram_gb": 80, "devices": devices}}), 200)
	a.connect()
	ctx, cancel := context.WithCancel(context.Background())
	e.t.Cleanup(cancel)
	go func() {
		for ctx.Err() == nil {
			a.mu.Lock()
			if a.silent {
				a.mu.Unlock()
				return
			}
			var running []protocol.RunningAttempt
			for job, n := range a.running {
				running = append(running, protocol.RunningAttempt{JobID: job, Attempt: n})
			}
			a.mu.Unlock()
			body, _ := json.Marshal(map[string]any{"worker_id": a.id, "status": "idle", "running": running})
			req, _ := http.NewRequestWithContext(ctx, "POST", e.URL+"/api/workers/heartbeat", bytes.NewReader(body))
			req.Header.Set("X-Worker-Token", a.token)
			if res, err := http.DefaultClient.Do(req); err == nil {
				res.Body.Close()
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return a
}

// take waits for the next job_submit, acknowledges it and returns the job
// and the GPU indexes it was given.
func (a *slotAgent) take() (string, []int) {
	a.e.t.Helper()
	ev := a.next("job_submit", eventWait)
	job := ev["job_id"].(string)
	a.mu.Lock()
	a.running[job] = int(ev["attempt"].(float64))
	a.mu.Unlock()
	a.e.Must(a.report(job, "starting", map[string]any{"attempt": a.running[job]}), 200)
	var gpus []int
	list, _ := ev["gpus"].([]any)
	for _, g := range list {
		gpus = append(gpus, int(g.(map[string]any)["index"].(float64)))
	}
	slices.Sort(gpus)
	return job, gpus
}

// finish reports the job completed.
func (a *slotAgent) finish(job string) {
	a.e.t.Helper()
	a.mu.Lock()
	n := a.running[job]
	a.mu.Unlock()
	a.e.Must(a.report(job, "completed", map[string]any{"attempt": n}), 200)
	a.mu.Lock()
	delete(a.running, job)
	a.mu.Unlock()
}

// patientHeartbeats keeps a worker whose keep-alive loop is starved on a
// loaded machine from being taken for lost: placement tests expect their
// workers to stay.
func patientHeartbeats(o *orchestrator.Options) { o.HeartbeatTimeout = 10 * time.Second }

func gpuJobBody(gpus, priority int) map[string]any {
	return map[string]any{"gpu_count": gpus, "priority": priority}
}

// Best fit: a job goes where it leaves the fewest GPUs free, so the whole
// machine stays whole for the job that needs all of it.
func TestSchedulerBestFit(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t), patientHeartbeats)
		a := e.startSlotAgent("a", 8)
		six := e.Submit(gpuJobBody(6, 10))
		if job, gpus := a.take(); job != six || len(gpus) != 6 {
			t.Fatalf("a got %s on %v, want %s on six GPUs", job, gpus, six)
		}
		b := e.startSlotAgent("b", 8)

		// a has 2 free, b 8: the 2-GPU job fills a.
		two := e.Submit(gpuJobBody(2, 10))
		if job, gpus := a.take(); job != two || !slices.Equal(gpus, []int{6, 7}) {
			t.Fatalf("a got %s on %v, want %s on [6 7]", job, gpus, two)
		}
		b.noEvent("job_submit", 300*time.Millisecond)
		if w := e.Worker(a.id); w["status"] != "busy" || w["gpus_free"] != float64(0) || w["running_jobs"] != float64(2) {
			t.Errorf("full worker a: status %v, gpus_free %v, running_jobs %v", w["status"], w["gpus_free"], w["running_jobs"])
		}

		// The 8-GPU job still has a whole machine.
		eight := e.Submit(gpuJobBody(8, 10))
		if job, gpus := b.take(); job != eight || len(gpus) != 8 {
			t.Fatalf("b got %s on %v, want %s on eight GPUs", job, gpus, eight)
		}

		// Freed GPUs are given again: a keeps its six-GPU job and takes a
		// 1-GPU one, left partial with one GPU free.
		a.finish(two)
		one := e.Submit(gpuJobBody(1, 10))
		if job, gpus := a.take(); job != one || len(gpus) != 1 {
			t.Fatalf("a got %s on %v after its 2-GPU job ended, want %s on one GPU", job, gpus, one)
		}
		if w := e.Worker(a.id); w["status"] != "partial" || w["gpus_free"] != float64(1) {
			t.Errorf("worker a with one GPU free: status %v, gpus_free %v", w["status"], w["gpus_free"])
		}
	})
}

// Draining a worker that runs several jobs: they keep running and finish,
// no new job starts there although GPUs are free, and resume lets the
// waiting one in.
func TestDrainWorkerRunningSeveralJobs(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t), patientHeartbeats)
		w := e.startSlotAgent("quad", 4)
		first := e.Submit(gpuJobBody(1, 10))
		w.take()
		second := e.Submit(gpuJobBody(1, 10))
		w.take()
		e.Must(e.AdminDo("POST", "/api/admin/workers/"+w.id+"/drain", nil), 200)
		w.next("drain", eventWait)
		third := e.Submit(gpuJobBody(1, 10))
		w.noEvent("job_submit", 500*time.Millisecond)
		if st := e.Worker(w.id); st["status"] != "draining" || st["running_jobs"] != float64(2) || st["gpus_free"] != float64(2) {
			t.Fatalf("draining worker: status %v, running_jobs %v, gpus_free %v", st["status"], st["running_jobs"], st["gpus_free"])
		}
		for _, id := range []string{first, second} {
			if j := e.Job(id); j["status"] != "running" {
				t.Fatalf("job %s on the draining worker: %v", id, j["status"])
			}
		}
		w.finish(first)
		w.finish(second)
		w.noEvent("job_submit", 500*time.Millisecond)
		if st := e.Worker(w.id); st["status"] != "draining" || st["running_jobs"] != float64(0) {
			t.Fatalf("drained worker: status %v, running_jobs %v", st["status"], st["running_jobs"])
		}
		for _, id := range []string{first, second} {
			if j := e.Job(id); j["status"] != "completed" {
				t.Fatalf("job %s after finishing on the draining worker: %v", id, j["status"])
			}
		}
		if j := e.Job(third); j["status"] != "queued" {
			t.Fatalf("job submitted during the drain: %v", j["status"])
		}
		e.Must(e.AdminDo("POST", "/api/admin/workers/"+w.id+"/resume", nil), 200)
		if job, _ := w.take(); job != third {
			t.Fatalf("after resume the worker got %s, want %s", job, third)
		}
	})
}

// No starvation: a 4-GPU job of the top priority that finds no room
// reserves the worker with the most GPUs free; lower-priority 1-GPU jobs
// that would fit there wait (reserved_for), and the big job starts as soon
// as the GPUs in use are released.
func TestSchedulerReservationAgainstStarvation(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t), patientHeartbeats)
		w := e.startSlotAgent("quad", 4)
		first := e.Submit(gpuJobBody(1, 1))
		if job, _ := w.take(); job != first {
			t.Fatalf("got %s, want %s", job, first)
		}

		big := e.Submit(gpuJobBody(4, 50))
		var smalls []string
		for range 3 {
			smalls = append(smalls, e.Submit(gpuJobBody(1, 1)))
		}
		w.noEvent("job_submit", 400*time.Millisecond)
		testutil.Eventually(t, eventWait, "the waiting reasons", func() bool {
			small := e.Job(smalls[0])
			detail, _ := small["waiting_detail"].(string)
			return e.Job(big)["waiting_reason"] == "gpus_busy" && small["waiting_reason"] == "reserved_for" && strings.Contains(detail, big)
		})

		w.finish(first)
		job, gpus := w.take()
		if job != big || !slices.Equal(gpus, []int{0, 1, 2, 3}) {
			t.Fatalf("after the 1-GPU job ended the worker got %s on %v, want %s on all four", job, gpus, big)
		}
		w.noEvent("job_submit", 300*time.Millisecond)
		if r := e.Job(smalls[0])["waiting_reason"]; r != "gpus_busy" {
			t.Errorf("a 1-GPU job behind the running 4-GPU job waits for %v, want gpus_busy", r)
		}

		// Once the big job ends the small ones share the machine.
		w.finish(big)
		var got []string
		for range 3 {
			job, gpus := w.take()
			if len(gpus) != 1 {
				t.Errorf("%s got GPUs %v, want one", job, gpus)
			}
			got = append(got, job)
		}
		slices.Sort(got)
		slices.Sort(smalls)
		if !slices.Equal(got, smalls) {
			t.Errorf("started %v, want %v", got, smalls)
		}
	})
}

// A worker that vanishes while partly busy goes offline at the heartbeat
// timeout like any other, and its attempt is requeued.
func TestPartialWorkerThatVanishesGoesOffline(t *testing.T) {
	t.Parallel()
	e := setup(t, backends["sqlite"](t))
	w := e.startSlotAgent("quad", 4)
	job := e.Submit(gpuJobBody(1, 10))
	if got, _ := w.take(); got != job {
		t.Fatalf("got %s, want %s", got, job)
	}
	testutil.Eventually(t, eventWait, "the worker partly busy", func() bool { return e.Worker(w.id)["status"] == "partial" })
	w.silence()
	testutil.Eventually(t, eventWait, "the silent worker offline and its job requeued", func() bool {
		j := e.Job(job)
		return e.Worker(w.id)["status"] == "offline" && j["status"] == "queued" && j["retries_used"] == float64(1)
	})
}

// A pass reads the queue a page at a time: jobs at its head that no worker
// can take do not hide one behind them that a worker can.
func TestSchedulerLooksPastTheFirstPage(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t), patientHeartbeats)
		for range 40 {
			e.Submit(map[string]any{"priority": 10, "worker_labels": map[string]string{"pool": "nowhere"}})
		}
		want := e.Submit(map[string]any{"priority": 1})
		w := e.startAgent("here", map[string]string{"pool": "here"}, nil)
		if ev := w.next("job_submit", eventWait); ev["job_id"] != want {
			t.Fatalf("the worker got %v, want %s", ev["job_id"], want)
		}
	})
}

// A reservation holds while its job waits behind more jobs than a pass's
// first page of the queue: a small job still cannot take the reserved
// worker's freed GPU.
func TestSchedulerReservationBehindTheFirstPage(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t), patientHeartbeats)
		w := e.startSlotAgent("quad", 4)
		var first []string
		for range 2 {
			e.Submit(gpuJobBody(1, 1))
			job, _ := w.take()
			first = append(first, job)
		}
		big := e.Submit(gpuJobBody(4, 40))
		small := e.Submit(gpuJobBody(1, 1))
		testutil.Eventually(t, eventWait, "the small job held back for the big one", func() bool {
			return e.Job(small)["waiting_reason"] == "reserved_for"
		})
		for range 20 { // ahead of the big job in the queue, and for no worker
			e.Submit(map[string]any{"priority": 50, "gpu_count": 1, "worker_labels": map[string]string{"pool": "nowhere"}})
		}
		w.finish(first[0])
		w.noEvent("job_submit", 400*time.Millisecond)
		w.finish(first[1])
		if job, gpus := w.take(); job != big || len(gpus) != 4 {
			t.Fatalf("the freed worker got %s on %v, want %s on all four", job, gpus, big)
		}
	})
}

// The documented submit, with no gpu_count, reaches the GPUs: without a
// process count in the config the job takes the whole worker (every GPU,
// alone); with --num_processes it gets that many; gpu_count 0 gets none and
// runs beside others. Each says what it will get in the submit reply and in
// the job view.
func TestSubmitWithoutGPUCountReachesTheGPUs(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t), patientHeartbeats)
		a := e.startSlotAgent("a", 2)

		r := e.Must(e.AdminDo("POST", "/api/queue/submit", map[string]any{"config": map[string]any{"model_type": "lora"}}), 201)
		whole := r.JSON["job_id"].(string)
		if r.JSON["gpu_allocation"] != "whole worker" || r.JSON["whole_worker"] != true || r.JSON["gpu_count"] != nil {
			t.Fatalf("submit reply for a job without a GPU count: %s", r.Body)
		}
		if v := e.Job(whole); v["gpu_allocation"] != "whole worker" || v["gpu_count"] != nil {
			t.Fatalf("job view: gpu_allocation %v gpu_count %v", v["gpu_allocation"], v["gpu_count"])
		}
		if job, gpus := a.take(); job != whole || !slices.Equal(gpus, []int{0, 1}) {
			t.Fatalf("a got %s on %v, want %s on both GPUs", job, gpus, whole)
		}
		if w := e.Worker(a.id); w["status"] != "busy" {
			t.Fatalf("a worker held whole is %v, want busy", w["status"])
		}

		// Nothing runs beside a whole-worker job, not even one without GPUs.
		cpu := e.Must(e.AdminDo("POST", "/api/queue/submit", map[string]any{"config": map[string]any{"model_type": "lora"}, "gpu_count": 0}), 201)
		if cpu.JSON["gpu_allocation"] != "no GPU (CPU only)" {
			t.Fatalf("submit reply for gpu_count 0: %s", cpu.Body)
		}
		cpuJob := cpu.JSON["job_id"].(string)
		a.noEvent("job_submit", 300*time.Millisecond)
		testutil.Eventually(t, eventWait, "the CPU job's waiting reason", func() bool {
			return e.Job(cpuJob)["waiting_reason"] == "workers_busy"
		})
		a.finish(whole)
		if job, gpus := a.take(); job != cpuJob || len(gpus) != 0 {
			t.Fatalf("a got %s on %v, want %s on no GPU", job, gpus, cpuJob)
		}

		// The config's process count: one GPU, beside the CPU job.
		one := e.Submit(map[string]any{"config": map[string]any{"model_type": "lora", "--num_processes": 1}})
		if v := e.Job(one); v["gpu_allocation"] != "1 GPU" || v["gpu_count"] != float64(1) {
			t.Fatalf("job with --num_processes 1: gpu_allocation %v gpu_count %v", v["gpu_allocation"], v["gpu_count"])
		}
		if job, gpus := a.take(); job != one || len(gpus) != 1 {
			t.Fatalf("a got %s on %v, want %s on one GPU", job, gpus, one)
		}

		// A whole-worker job waits while the worker runs others, and says so.
		next := e.Submit(map[string]any{})
		testutil.Eventually(t, eventWait, "the whole-worker job's waiting reason", func() bool {
			v := e.Job(next)
			return v["waiting_reason"] == "gpus_busy" && strings.Contains(v["waiting_detail"].(string), "whole worker")
		})
		a.finish(cpuJob)
		a.finish(one)
		if job, gpus := a.take(); job != next || !slices.Equal(gpus, []int{0, 1}) {
			t.Fatalf("a got %s on %v, want %s on both GPUs", job, gpus, next)
		}

		// A process count that is not one is refused, naming the field.
		bad := e.Must(e.AdminDo("POST", "/api/queue/submit", map[string]any{"config": map[string]any{"--num_processes": "auto"}}), 422)
		if !strings.Contains(string(bad.Body), `config.--num_processes`) {
			t.Fatalf("refusal of a bad process count: %s", bad.Body)
		}
	})
}
