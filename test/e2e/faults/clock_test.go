package faults

import (
	"math"
	"testing"
	"time"

	. "github.com/simpletuner/simpletuner-orchestration/test/e2e/e2etest"
)

// Clock skew: two workers whose clocks are 10 minutes ahead and behind (a
// workerd test hook shifts the wall clock it reports; libfaketime cannot
// reach the Go runtime's clock) run jobs like everyone else: never marked
// offline, tokens never refused, nothing requeued; the worker list shows each
// one's skew.
func TestWorkerClockSkew(t *testing.T) {
	fullOnly(t)
	o := StartOrchestratorWith(t, OrchOptions{Metrics: true})
	h := NewHistory(t, o)
	offsets := map[string]time.Duration{}
	for name, off := range map[string]time.Duration{"ahead": 10 * time.Minute, "behind": -10 * time.Minute} {
		w := o.StartWorker(WorkerSpec{Name: name, Persistent: true, Labels: map[string]string{"pool": name}, Command: h.WrapperCommand(),
			Env: []string{"SIMPLETUNER_WORKERD_TEST_CLOCK_OFFSET=" + off.String()}})
		offsets[w.ID] = off
	}
	for range 2 {
		for _, pool := range []string{"ahead", "behind"} {
			h.Submit(trainFor(1), map[string]any{"worker_labels": map[string]string{"pool": pool}})
		}
	}
	h.WaitAllTerminal(60 * time.Second)
	shown := map[string]float64{}
	Eventually(t, 10*time.Second, "both skews in the worker list", func() bool {
		st, m := o.Do("GET", "/api/admin/workers", nil)
		if st != 200 {
			return false
		}
		list, _ := m["workers"].([]any)
		for _, x := range list {
			w := x.(map[string]any)
			if v, ok := w["clock_skew_seconds"].(float64); ok {
				shown[w["worker_id"].(string)] = v
			}
		}
		return len(shown) == 2
	})
	h.Finish()
	sum := h.Check(Expect{MaxRequeues: 0, Statuses: []string{"completed"}})
	for id, off := range offsets {
		if math.Abs(shown[id]-off.Seconds()) > 5 {
			t.Errorf("worker %s (clock %s off): clock_skew_seconds %v", id, off, shown[id])
		}
		if w := o.Worker(id); w["status"] != "idle" {
			t.Errorf("worker %s (clock %s off) is %v", id, off, w["status"])
		}
	}
	for _, r := range h.Audit {
		if r.Action == "worker.offline" || r.Action == "auth.failure" {
			t.Errorf("%s during the run: %s", r.Action, r.Details)
		}
	}
	t.Logf("RESULT %s: worker list clock_skew_seconds %v for offsets %v; none offline, no token refused; %s", t.Name(), shown, offsets, sum)
}
