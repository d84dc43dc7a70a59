package faults

import (
	"strings"
	"testing"
	"time"

	. "github.com/simpletuner/simpletuner-orchestration/test/e2e/e2etest"
)

// A partition shorter than the heartbeat timeout and the worker's self-fence:
// nothing is requeued, the job completes on attempt 1. The scenario's timers
// (4 s, fence 3 s) leave the 600 ms cut a wide margin: on a loaded machine a
// heartbeat can wait several hundred milliseconds for its answer before the
// cut, and that wait counts toward the fence as much as the cut does.
func TestPartitionShorterThanTimeout(t *testing.T) {
	o := StartOrchestratorWith(t, OrchOptions{Metrics: true, HeartbeatTimeout: "4s"})
	h := NewHistory(t, o)
	px := NewProxy(t, strings.TrimPrefix(o.URL, "http://"))
	o.StartWorker(WorkerSpec{Name: "flaky", Persistent: true, URL: px.URL(), SelfFenceAfter: "3s", Command: h.WrapperCommand()})
	_, id := h.Submit(trainFor(3), nil)
	o.WaitJob(id, "running", 20*time.Second)
	h.Fault("partition worker for 600ms")
	px.SetCut(true)
	time.Sleep(600 * time.Millisecond)
	px.SetCut(false)
	h.Fault("partition healed")
	h.WaitAllTerminal(30 * time.Second)
	h.Finish()
	sum := h.Check(Expect{MaxRequeues: 0, Statuses: []string{"completed"}})
	if j := h.Final[id]; j["attempt"] != float64(1) {
		t.Errorf("short partition caused a new attempt: %v", j)
	}
	t.Logf("RESULT %s: %s", t.Name(), sum)
}

// A partition longer than the timeout: the cut-off worker fences itself (1 s)
// before the orchestrator gives its attempt away (1.5 s), the retry runs on
// another worker with no overlap, and the cut-off worker's late report is
// refused as stale when the partition heals; the completed job stays completed.
func TestPartitionLongerThanTimeout(t *testing.T) {
	o := StartOrchestratorWith(t, OrchOptions{Metrics: true})
	h := NewHistory(t, o)
	px := NewProxy(t, strings.TrimPrefix(o.URL, "http://"))
	a := o.StartWorker(WorkerSpec{Name: "cut-off", Persistent: true, URL: px.URL(), Labels: map[string]string{"pool": "p"}, Command: h.WrapperCommand()})
	_, id := h.Submit(trainFor(3), map[string]any{"worker_labels": map[string]string{"pool": "p"}})
	Eventually(t, 20*time.Second, "job running", func() bool { return len(JobProcs(id)) > 0 })
	h.Fault("partition worker cut-off")
	px.SetCut(true)
	fenced := time.Time{}
	Eventually(t, 10*time.Second, "the cut-off worker to fence itself", func() bool {
		if len(JobProcs(id)) == 0 {
			fenced = time.Now()
			return true
		}
		return false
	})
	o.StartWorker(WorkerSpec{Name: "rescuer", Persistent: true, Labels: map[string]string{"pool": "p"}, Command: h.WrapperCommand()})
	o.WaitJob(id, "completed", 30*time.Second)
	px.SetCut(false)
	h.Fault("partition healed")
	Eventually(t, 10*time.Second, "cut-off worker back and its stale report refused", func() bool {
		return o.Worker(a.ID)["connected"] == true && o.Metric("simpletuner_stale_attempt_rejections_total") >= 1
	})
	h.WaitAllTerminal(10 * time.Second)
	h.Finish()
	sum := h.Check(Expect{MaxRequeues: 1, MinStaleRejections: 1, Statuses: []string{"completed"}})
	at := Attempts(h.Final[id])
	if len(at) != 2 || at[0]["worker_id"] != a.ID || at[1]["worker_id"] == a.ID {
		t.Errorf("attempts %v, want attempt 1 on the cut-off worker and attempt 2 elsewhere", at)
	}
	// The retry's first sign of life came after the fence.
	for _, e := range h.Events() {
		if e.Job == id && e.Attempt == "2" && (e.Kind == "proc_start" || e.Kind == "wrap_start") && e.At.Before(fenced.Add(-20*time.Millisecond)) {
			t.Errorf("attempt 2 started at %s, before the cut-off worker fenced itself at %s", e.At.Format("15:04:05.000"), fenced.Format("15:04:05.000"))
		}
	}
	t.Logf("RESULT %s: %s", t.Name(), sum)
}
