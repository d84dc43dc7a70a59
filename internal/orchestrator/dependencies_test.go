package orchestrator_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

func after(jobs ...string) []map[string]any {
	var out []map[string]any
	for _, j := range jobs {
		out = append(out, map[string]any{"job_id": j})
	}
	return out
}

// A job that depends on another waits, out of the queue, and says for
// what; the other's success releases it to the first free worker.
func TestDependentJobRunsAfterItsDependency(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t))
		first := e.Submit(map[string]any{})
		r := e.Must(e.AdminDo("POST", "/api/queue/submit", map[string]any{"config": map[string]any{"model_type": "lora"},
			"depends_on": after(first)}), 201).JSON
		second := r["job_id"].(string)
		if r["status"] != "waiting" || r["queue_position"] != float64(0) {
			t.Fatalf("submit of a dependent job: %v", r)
		}
		if log := string(e.Must(e.AdminDo("GET", "/api/admin/audit?action=job.submit", nil), 200).Body); !strings.Contains(log, `"depends_on":[{"job_id":"`+first+`","when":"ok"}]`) {
			t.Fatalf("the submit's audit record does not name its dependency: %s", log)
		}
		a := e.startAgent("w", nil, oneGPU)
		a.take(first)
		j := e.Job(second)
		deps, _ := j["depends_on"].([]any)
		if j["status"] != "waiting" || j["waiting_reason"] != "dependency" || len(deps) != 1 ||
			!strings.Contains(j["waiting_detail"].(string), first+" to complete") {
			t.Fatalf("waiting job: %v", j)
		}
		if d := deps[0].(map[string]any); d["job_id"] != first || d["when"] != "ok" || d["state"] != "pending" || j["on_unmet"] != "cancel" {
			t.Fatalf("dependency %v, on_unmet %v", d, j["on_unmet"])
		}
		if l := e.Must(e.Queue("status=waiting&waiting=1"), 200).JSON; len(jobIDsOf(l)) != 1 ||
			l["entries"].([]any)[0].(map[string]any)["waiting_reason"] != "dependency" {
			t.Fatalf("status=waiting: %v", l)
		}
		e.Must(a.report(first, "completed", nil), 200)
		a.take(second)
		if d := e.Job(second)["depends_on"].([]any)[0].(map[string]any); d["state"] != "met" || d["status"] != "completed" {
			t.Fatalf("dependency after its job completed: %v", d)
		}
	})
}

// A dependency that can never be met cancels the job, naming it; a job
// held on unmet dependencies stays waiting until cancelled.
func TestUnmetDependencyCancelsOrHolds(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t))
		dep := e.Submit(map[string]any{})
		cancelled := e.Submit(map[string]any{"depends_on": after(dep)})
		held := e.Submit(map[string]any{"depends_on": after(dep), "on_unmet": "hold"})
		either := e.Submit(map[string]any{"depends_on": []map[string]any{{"job_id": dep, "when": "any"}}})
		e.Must(e.Cancel(dep), 200)
		if j := e.Job(cancelled); j["status"] != "cancelled" ||
			j["error_message"] != "dependency "+dep+" ended cancelled; this job needed it to complete" {
			t.Fatalf("dependent of a cancelled job: %v %v", j["status"], j["error_message"])
		}
		if j := e.Job(either); j["status"] != "queued" {
			t.Fatalf("a job after any end of a cancelled job: %v", j["status"])
		}
		j := e.Job(held)
		if j["status"] != "waiting" || j["waiting_reason"] != "dependency_never_satisfied" || j["on_unmet"] != "hold" ||
			!strings.Contains(j["waiting_detail"].(string), "dependency "+dep+" ended cancelled") {
			t.Fatalf("held job: %v", j)
		}
		if r := e.Must(e.Cancel(held), 200).JSON; r["status"] != "cancelled" {
			t.Fatalf("cancel of a held job: %v", r)
		}
	})
}

// Bad dependencies are refused with the field named, and change nothing;
// a job of a team the submitter may not see is as unknown.
func TestDependencySubmitErrors(t *testing.T) {
	t.Parallel()
	e := setup(t, backends["sqlite"](t), withWalledTeams())
	alpha := e.scopedToken("alpha", "alpha", "queue.view", "queue.submit", "queue.cancel")
	bravo := e.scopedToken("bravo", "bravo", "queue.view", "queue.submit")
	ours := e.Must(e.submitAs(alpha, nil), 201).JSON["job_id"].(string)
	theirs := e.Must(e.submitAs(bravo, nil), 201).JSON["job_id"].(string)
	failed := e.Must(e.submitAs(alpha, nil), 201).JSON["job_id"].(string)
	e.Must(e.asWith(alpha, "POST", "/api/queue/"+failed+"/cancel", nil), 200)
	many := make([]map[string]any, 101)
	for i := range many {
		many[i] = map[string]any{"job_id": fmt.Sprintf("j_%08d", i)}
	}
	for _, c := range []struct {
		body map[string]any
		want string
	}{
		{map[string]any{"depends_on": []map[string]any{{"job_id": ""}}}, `"depends_on[0].job_id" is required`},
		{map[string]any{"depends_on": []map[string]any{{"job_id": ours, "when": "afterok"}}}, `"depends_on[0].when" must be ok, any, failed`},
		{map[string]any{"depends_on": after(ours, "j_unknown00")}, `"depends_on[1].job_id": no job j_unknown00`},
		{map[string]any{"depends_on": after(theirs)}, `"depends_on[0].job_id": no job ` + theirs},
		{map[string]any{"depends_on": after(ours, ours)}, `"depends_on[1].job_id": job ` + ours + ` is named twice`},
		{map[string]any{"depends_on": after(failed)}, `job ` + failed + ` already ended cancelled`},
		{map[string]any{"depends_on": after(ours), "on_unmet": "keep"}, `"on_unmet" must be cancel or hold`},
		{map[string]any{"on_unmet": "hold"}, `"on_unmet" needs "depends_on"`},
		{map[string]any{"depends_on": many}, `"depends_on" names 101 jobs; at most 100`},
	} {
		r := e.submitAs(alpha, c.body)
		if detail, _ := r.JSON["detail"].(string); r.Status != 422 || !strings.Contains(detail, c.want) {
			t.Errorf("%v: got %d %s, want 422 saying %q", c.body, r.Status, r.Body, c.want)
		}
	}
	if l := e.Must(e.as(alpha, "GET", "/api/queue"), 200).JSON; len(jobIDsOf(l)) != 2 {
		t.Fatalf("refused submits changed the queue: %v", l)
	}
	if r := e.Must(e.submitAs(alpha, map[string]any{"depends_on": after(failed), "on_unmet": "hold"}), 201).JSON; r["status"] != "waiting" {
		t.Fatalf("a held submit on an unmet dependency: %v", r)
	}
}
