package faults

import (
	"strings"
	"testing"
	"time"

	. "github.com/simpletuner/simpletuner-orchestration/test/e2e/e2etest"
)

// Two workerd processes with one token (a configuration copied to a second
// host): the first keeps the session, the second is refused with a clear
// line on both sides and one audit record, takes no job, and takes over only
// once the first is gone. Before the session check, the second one's
// registration closed the first one's stream and, reporting no attempts,
// had the first one's running job requeued while it still ran.
func TestDuplicateWorkerIdentity(t *testing.T) {
	fullOnly(t) // keeps make test's fast subset under a minute; CI runs make faults too
	o := StartOrchestratorWith(t, OrchOptions{Metrics: true})
	h := NewHistory(t, o)
	id, token := o.CreateWorker("twin", true, nil)
	spec := WorkerSpec{Name: "twin", Persistent: true, Command: h.WrapperCommand()}
	first := o.StartWorkerFor(id, token, spec)
	_, running := h.Submit(trainFor(3), nil)
	Eventually(t, 20*time.Second, "the first job training", func() bool { return len(JobProcs(running)) > 0 })

	h.Fault("a second workerd starts with the same token (another state directory)")
	spec.NoWait = true
	second := o.StartWorkerFor(id, token, spec)
	Eventually(t, 10*time.Second, "the refusal logged on both sides", func() bool {
		return strings.Contains(second.P.Output(), "another simpletuner-workerd is connected with this worker's token") &&
			strings.Contains(o.P.Output(), "refused a second workerd")
	})
	var queued []string
	for range 3 {
		_, id := h.Submit(trainFor(0.3), nil)
		queued = append(queued, id)
	}
	h.WaitAllTerminal(60 * time.Second)
	for _, job := range append([]string{running}, queued...) {
		if strings.Contains(second.P.Output(), job) {
			t.Errorf("the refused workerd heard of job %s", job)
		}
	}

	// The holder dies: the twin takes the worker over once it is offline.
	h.Fault("kill -9 the first workerd")
	first.P.Kill9()
	killed := time.Now()
	Eventually(t, 20*time.Second, "the second workerd registered", func() bool {
		return strings.Contains(second.P.Output(), "registered with the orchestrator")
	})
	tookOver := time.Since(killed)
	_, after := h.Submit(trainFor(0.3), nil)
	o.WaitJob(after, "completed", 20*time.Second)
	if !strings.Contains(second.P.Output(), after) {
		t.Errorf("job %s completed, but not on the second workerd", after)
	}
	h.WaitAllTerminal(30 * time.Second)
	h.Finish()
	sum := h.Check(Expect{MaxRequeues: 0, Statuses: []string{"completed"}})
	refused, takeover := 0, 0
	for _, r := range h.Audit {
		switch {
		case r.Action == "worker.session_refused" && r.TargetID == id:
			refused++
		case r.Action == "worker.register" && strings.Contains(string(r.Details), "session_taken_over_from"):
			takeover++
		}
	}
	if refused != 1 || takeover != 1 {
		t.Errorf("audit: %d worker.session_refused (want 1: repeated refusals are recorded once a minute), %d takeovers (want 1)", refused, takeover)
	}
	t.Logf("RESULT %s: twin refused and idle while the first ran %d jobs; it took over %s after the first was killed; %s",
		t.Name(), 1+len(queued), tookOver.Round(time.Millisecond), sum)
}
