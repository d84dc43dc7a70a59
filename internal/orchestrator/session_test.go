package orchestrator_test

import (
	"strings"
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/orchtest"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
)

// Two workerd installations with one token: the one that registered first
// keeps the session while it is alive; the other is refused on every
// endpoint, logged and audited once, and takes over only after the first
// went offline.
func TestSecondInstallationRefused(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t))
		id, token := e.CreateWorker("twin", "persistent", nil)
		as := func(sess string) map[string]string {
			return map[string]string{"X-Worker-Token": token, protocol.HeaderWorkerSession: sess}
		}
		reg := func(sess string) orchtest.Reply {
			return e.Do("POST", "/api/workers/register", as(sess), map[string]any{"name": "twin", "persistent": true, "protocol": 2})
		}
		beat := func(sess string) orchtest.Reply {
			return e.Do("POST", "/api/workers/heartbeat", as(sess), map[string]any{"worker_id": id, "status": "idle"})
		}
		first, second := strings.Repeat("a", 32), strings.Repeat("b", 32)
		e.Must(reg(first), 200)
		e.Must(beat(first), 200)
		for range 3 {
			r := e.Must(reg(second), 409)
			if r.JSON["error"] != protocol.CodeSessionActive || !strings.Contains(r.JSON["detail"].(string), "another simpletuner-workerd") {
				t.Fatalf("refusal: %s", r.Body)
			}
			e.Must(beat(second), 409)
			e.Must(e.Do("GET", "/api/workers/stream?worker_id="+id, as(second), nil), 409)
			e.Must(e.Do("POST", "/api/workers/disconnect", as(second), map[string]any{"worker_id": id}), 409)
		}
		e.Must(beat(first), 200) // the holder is unaffected
		if st := e.Worker(id)["status"]; st == "offline" {
			t.Fatalf("the refused twin's disconnect took the worker offline")
		}
		audits := func(action string) []map[string]any {
			r := e.Must(e.AdminDo("GET", "/api/admin/audit?action="+action+"&target="+id, nil), 200)
			var out []map[string]any
			for _, rec := range r.JSON["records"].([]any) {
				out = append(out, rec.(map[string]any))
			}
			return out
		}
		// Made-up installation ids from a holder of the token: still one
		// record a minute for the worker, not one per request.
		for i := range 20 {
			e.Must(beat(strings.Repeat("c", 31)+string(rune('a'+i))), 409)
		}
		if n := len(audits("worker.session_refused")); n != 1 {
			t.Fatalf("%d worker.session_refused records for 32 refusals within a minute, want 1", n)
		}
		if n := strings.Count(e.logs.String(), "refused a second workerd"); n != 1 {
			t.Fatalf("%d refusal log lines, want 1:\n%s", n, e.logs.String())
		}

		// The holder falls silent: once the worker is offline, the other
		// installation takes over, and the old one is the one refused now.
		testutil.Eventually(t, eventWait, "the silent holder offline", func() bool { return e.Worker(id)["status"] == "offline" })
		e.Must(reg(second), 200)
		e.Must(beat(first), 409)
		regs := audits("worker.register")
		last := regs[0]["details"].(map[string]any) // newest first
		if last["session_taken_over_from"] != first[:12] || last["session"] != second[:12] {
			t.Fatalf("takeover not audited: %v", regs)
		}
		if !strings.Contains(e.logs.String(), "took over this worker") {
			t.Fatalf("takeover not logged")
		}
		// An agent that sends no installation id (SimpleTuner's) is never refused.
		e.Must(e.Do("POST", "/api/workers/heartbeat", map[string]string{"X-Worker-Token": token},
			map[string]any{"worker_id": id, "status": "idle"}), 200)
	})
}
