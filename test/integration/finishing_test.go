package integration

import (
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
)

// connected waits until the worker holds a stream to o.
func (o *orch) connected(id string) {
	o.t.Helper()
	testutil.Eventually(o.t, 30*time.Second, "worker "+id+" connected", func() bool {
		_, w := o.API("GET", "/api/admin/workers/"+id, nil)
		return w["connected"] == true
	})
}

// passHeartbeats waits until n more heartbeats reached o.
func (o *orch) passHeartbeats(n int64) {
	o.t.Helper()
	from := o.heartbeats()
	testutil.Eventually(o.t, 30*time.Second, "heartbeats", func() bool { return o.heartbeats() >= from+n })
}

func attempts(j map[string]any) []map[string]any {
	var out []map[string]any
	at, _ := j["attempts"].([]any)
	for _, a := range at {
		out = append(out, a.(map[string]any))
	}
	return out
}

// wantRanOnce checks that the job completed in its first and only attempt.
func wantRanOnce(t *testing.T, o *orch, jobID string) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, "job "+jobID+" completed", func() bool { return o.job(jobID)["status"] == "completed" })
	j := o.job(jobID)
	at := attempts(j)
	if len(at) != 1 || at[0]["outcome"] != "completed" || j["retries_used"] != float64(0) {
		t.Fatalf("job %s: attempts %v, retries_used %v; want one completed attempt and no retry", jobID, at, j["retries_used"])
	}
}

// The trainer exits and its "completed" report is slow to arrive (held by the
// gate) while heartbeats keep flowing: the heartbeats must keep answering for
// the attempt, so the orchestrator neither takes it for lost nor runs the job
// a second time.
func TestFinishedJobKeptWhileItsReportIsDelayed(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func(*testing.T) store.Store) {
		o := startOrch(t, open(t), fastOptions(t), "")
		id, token := o.createWorker("w")
		gate := newReportGate(t, o.URL)
		startWorker(t, gate.http.URL, token)
		o.connected(id)

		gate.set("hold")
		jobID := o.submit(map[string]any{"steps": 2, "step_seconds": 0.05})
		testutil.Eventually(t, 30*time.Second, "the completed report held at the gate", func() bool { return gate.stopped() >= 1 })
		o.passHeartbeats(5)
		if j := o.job(jobID); j["status"] != "running" || len(attempts(j)) != 1 {
			t.Fatalf("while the report was held the job became %v with attempts %v; want running, attempt 1", j["status"], attempts(j))
		}
		gate.release()
		wantRanOnce(t, o, jobID)
	})
}

// The same after an orchestrator restart: the worker re-registers while its
// report still cannot be delivered (503), and the registration must list the
// finishing attempt so that reconciliation resumes it instead of requeueing.
func TestFinishedJobKeptAcrossRestartBeforeItsReport(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func(*testing.T) store.Store) {
		st := open(t)
		o := startOrch(t, st, fastOptions(t), "")
		id, token := o.createWorker("w")
		gate := newReportGate(t, o.URL)
		startWorker(t, gate.http.URL, token)
		o.connected(id)

		gate.set("fail")
		jobID := o.submit(map[string]any{"steps": 2, "step_seconds": 0.05})
		testutil.Eventually(t, 30*time.Second, "the completed report refused at the gate", func() bool { return gate.stopped() >= 1 })

		o.Stop()
		o2 := startOrch(t, st, fastOptions(t), o.Admin)
		gate.retarget(o2.URL)
		o2.connected(id)
		o2.passHeartbeats(5)
		if j := o2.job(jobID); j["status"] != "running" || len(attempts(j)) != 1 {
			t.Fatalf("after the restart the job became %v with attempts %v; want running, attempt 1", j["status"], attempts(j))
		}
		gate.release()
		wantRanOnce(t, o2, jobID)
	})
}
