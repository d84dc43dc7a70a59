package orchestrator_test

import (
	"strings"
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// A worker's job reports and logs are authenticated with only part of its
// row (store.GetReportingWorkerByTokenHash): what they use of it still
// counts. A terminal report's GPU conditions are kept for the GPUs of the
// worker's inventory (its gpu_info), and a second installation's session is
// refused on both routes as on the others.
func TestReportsUseTheWorkersGPUsAndSession(t *testing.T) {
	t.Parallel()
	e := setup(t, backends["sqlite"](t))
	a := e.startAgent("gpu-box", nil, map[string]any{"name": "NVIDIA A100", "count": 2, "vram_gb": 80})
	jobID := e.Submit(map[string]any{})
	ev := a.next(protocol.EventJobSubmit, eventWait)
	if ev["job_id"] != jobID {
		t.Fatalf("dispatched %v, want %s", ev["job_id"], jobID)
	}
	e.Must(a.report(jobID, "starting", map[string]any{"attempt": 1}), 200)
	conds := []map[string]any{
		{"index": 1, "uuid": "GPU-1", "state": "unhealthy", "reason": "XID 79 (fell off the bus)", "since": "2030-01-01T00:00:00Z"},
		{"index": 7, "uuid": "GPU-7", "state": "unhealthy", "reason": "not in the inventory", "since": "2030-01-01T00:00:00Z"},
	}
	e.Must(a.report(jobID, "completed", map[string]any{"attempt": 1, "gpu_conditions": conds}), 200)
	if st := e.Job(jobID)["status"]; st != "completed" {
		t.Fatalf("job %s after its report", st)
	}
	got, _ := e.Worker(a.id)["gpu_conditions"].([]any)
	if len(got) != 1 || got[0].(map[string]any)["index"] != 1.0 {
		t.Fatalf("conditions kept from the terminal report: %v; want GPU 1's alone", got)
	}

	id, token := e.CreateWorker("twin", "persistent", nil)
	as := func(sess string) map[string]string {
		return map[string]string{"X-Worker-Token": token, protocol.HeaderWorkerSession: sess}
	}
	first, second := strings.Repeat("a", 32), strings.Repeat("b", 32)
	e.Must(e.Do("POST", "/api/workers/register", as(first), map[string]any{"name": "twin", "persistent": true, "protocol": 2}), 200)
	e.Must(e.Do("POST", "/api/workers/heartbeat", as(first), map[string]any{"worker_id": id, "status": "idle"}), 200)
	for _, path := range []string{"/api/workers/job/j_none/status", "/api/workers/job/j_none/logs"} {
		r := e.Must(e.Do("POST", path, as(second), map[string]any{"status": "running"}), 409)
		if r.JSON["error"] != protocol.CodeSessionActive {
			t.Errorf("%s from a second installation: %s", path, r.Body)
		}
	}
	e.Must(e.Do("POST", "/api/workers/job/j_none/status", as(first), map[string]any{"status": "running"}), 404)
}
