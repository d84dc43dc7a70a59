package orchestrator_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// A worker whose labels an admin locked cannot report its way into jobs
// meant for others: with a stolen token it advertises the label the
// targeted job asks for, and gets nothing; the job waits for the worker
// the admin labelled.
func TestLockedLabelsPinPlacement(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t))
		r := e.Must(e.AdminDo("POST", "/api/admin/workers", map[string]any{"name": "general", "labels_locked": true,
			"labels": map[string]string{"pool": "general"}}), 201)
		if r.JSON["labels_locked"] != true {
			t.Fatalf("create reply: %s", r.Body)
		}
		thief := e.newAgent(r.JSON["worker_id"].(string), r.JSON["token"].(string), 2)
		e.Must(thief.register(map[string]any{"labels": map[string]string{"pool": "secure", "tier": "secure"}}), 200)
		thief.connect()
		thief.keepAlive(thief.held)
		if got := e.Worker(thief.id); got["labels_locked"] != true || len(got["labels"].(map[string]any)) != 1 {
			t.Fatalf("locked worker shows %v", got)
		}
		job := e.Submit(map[string]any{"worker_labels": map[string]string{"tier": "secure"}, "hf_token": "hf_for_secure_only"})
		thief.noEvent("job_submit", 600*time.Millisecond)

		secure := e.startAgent("secure", map[string]string{"tier": "secure"}, nil)
		if ev := secure.next("job_submit", eventWait); ev["job_id"] != job {
			t.Fatalf("the secure worker got %v", ev)
		}

		// Unlocking lets reported labels count again from the next registration.
		e.Must(e.AdminDo("PATCH", "/api/admin/workers/"+thief.id, map[string]any{"labels_locked": false}), 200)
		e.Must(thief.register(map[string]any{"labels": map[string]string{"tier": "secure"}}), 200)
		if got := e.Worker(thief.id)["labels"].(map[string]any); got["tier"] != "secure" {
			t.Fatalf("unlocked worker's labels %v", got)
		}
	})
}

// Every change of what a worker reports for placement is on record: labels
// and GPU inventory before and after, and labels a locked worker reported
// and that were ignored.
func TestReportedChangesAreAudited(t *testing.T) {
	t.Parallel()
	st := backends["sqlite"](t)
	e := setup(t, st)
	id, token := e.CreateWorker("w", "persistent", map[string]string{"site": "a"})
	a := e.newAgent(id, token, 2)
	gpus := func(n int) map[string]any { return map[string]any{"count": n, "vram_gb": 80, "name": "H100"} }
	e.Must(a.register(map[string]any{"labels": map[string]string{"gpu": "h100"}, "gpu_info": gpus(8)}), 200)
	e.Must(a.register(map[string]any{"labels": map[string]string{"gpu": "h100"}, "gpu_info": gpus(8)}), 200) // no change
	e.Must(a.register(map[string]any{"labels": map[string]string{"gpu": "b200", "site": "z"}, "gpu_info": gpus(16)}), 200)
	e.Must(e.AdminDo("PATCH", "/api/admin/workers/"+id, map[string]any{"labels_locked": true}), 200)
	e.Must(a.register(map[string]any{"labels": map[string]string{"secure": "yes"}, "gpu_info": gpus(16)}), 200)

	_, all := auditCount(t, st)
	var regs []map[string]json.RawMessage
	for _, r := range all {
		if r.Action == "worker.register" && r.Outcome == audit.Success {
			var d map[string]json.RawMessage
			if err := json.Unmarshal(r.Details, &d); err != nil {
				t.Fatal(err)
			}
			regs = append(regs, d)
		}
	}
	if len(regs) != 4 {
		t.Fatalf("%d registrations audited; want 4", len(regs))
	}
	str := func(d map[string]json.RawMessage, k string) string { return string(d[k]) }
	if str(regs[0], "reported_labels_before") != `{}` || str(regs[0], "reported_labels_after") != `{"gpu":"h100"}` ||
		str(regs[0], "gpu_info_after") != `{"count":8,"name":"H100","vram_gb":80}` {
		t.Errorf("first registration: %v", regs[0])
	}
	if _, ok := regs[1]["reported_labels_after"]; ok {
		t.Errorf("an unchanged registration records a change: %v", regs[1])
	}
	if _, ok := regs[1]["gpu_info_after"]; ok {
		t.Errorf("an unchanged registration records a GPU change: %v", regs[1])
	}
	// The admin owns "site": the worker's "site" is not part of placement.
	if str(regs[2], "reported_labels_after") != `{"gpu":"b200"}` || str(regs[2], "gpu_info_before") != `{"count":8,"name":"H100","vram_gb":80}` ||
		str(regs[2], "gpu_info_after") != `{"count":16,"name":"H100","vram_gb":80}` {
		t.Errorf("changed registration: %v", regs[2])
	}
	if str(regs[3], "reported_labels_ignored") != `{"secure":"yes"}` {
		t.Errorf("locked registration: %v", regs[3])
	}
	var upd bool
	for _, r := range all {
		upd = upd || (r.Action == "worker.update" && string(r.Details) != "" && json.Valid(r.Details) &&
			containsJSON(r.Details, "labels_locked", "true"))
	}
	if !upd {
		t.Errorf("locking was not audited")
	}
}

// A locked worker's GPU inventory is locked with its labels: a stolen token
// that reports more or larger GPUs gets no job that needs them (and no such
// job's secrets); the report is on record, ignored. A smaller report (a GPU
// lost to a fault) is taken; unlocking lets a larger one count again.
func TestLockedWorkerInventory(t *testing.T) {
	t.Parallel()
	e := setup(t, backends["sqlite"](t))
	r := e.Must(e.AdminDo("POST", "/api/admin/workers", map[string]any{"name": "small", "labels_locked": true,
		"labels": map[string]string{"pool": "general"}}), 201)
	a := e.newAgent(r.JSON["worker_id"].(string), r.JSON["token"].(string), 2)
	gpus := func(n int, gb float64) map[string]any {
		return map[string]any{"count": n, "vram_gb": gb, "name": "GPU"}
	}
	e.Must(a.register(map[string]any{"gpu_info": gpus(1, 24)}), 200) // the first report after the lock
	e.Must(a.register(map[string]any{"gpu_info": gpus(8, 80)}), 200) // a thief's boast
	a.connect()
	a.keepAlive(a.held)
	if g := e.Worker(a.id)["gpu_count"]; g != float64(1) {
		t.Fatalf("the locked worker shows %v GPUs after reporting 8", g)
	}
	big := e.Submit(map[string]any{"gpu_count": 8, "hf_token": "hf_for_big_only"})
	a.noEvent("job_submit", 600*time.Millisecond)
	recs, _ := e.st.ListAuditNewest(t.Context(), store.AuditFilter{Action: "worker.register"})
	if len(recs) == 0 || !containsJSON(recs[0].Details, "gpu_info_ignored", `{"count":8,"name":"GPU","vram_gb":80}`) {
		t.Errorf("the ignored inventory is not on record: %s", recs[0].Details)
	}
	if !strings.Contains(e.logs.String(), "reports a larger GPU inventory than it had") {
		t.Error("the ignored inventory is not logged")
	}
	e.Must(a.register(map[string]any{"gpu_info": gpus(0, 0)}), 200) // lost its GPU: taken
	if g := e.Worker(a.id)["gpu_count"]; g != float64(0) {
		t.Fatalf("a smaller report was not taken: %v", g)
	}
	e.Must(e.AdminDo("PATCH", "/api/admin/workers/"+a.id, map[string]any{"labels_locked": false}), 200)
	e.Must(a.register(map[string]any{"gpu_info": gpus(8, 80)}), 200)
	a.connect()
	if ev := a.next("job_submit", eventWait); ev["job_id"] != big {
		t.Fatalf("after unlocking, the worker got %v", ev)
	}
}

// A worker an admin creates without saying otherwise is locked: what it
// reports of its labels, and a larger inventory than its first, do not
// count. An explicit "labels_locked": false trusts its reports.
func TestWorkersAreCreatedLocked(t *testing.T) {
	t.Parallel()
	e := setup(t, backends["sqlite"](t))
	gpus := func(n int) map[string]any { return map[string]any{"count": n, "vram_gb": 80, "name": "GPU"} }

	r := e.Must(e.AdminDo("POST", "/api/admin/workers", map[string]any{"name": "plain",
		"labels": map[string]string{"pool": "general"}}), 201)
	if r.JSON["labels_locked"] != true {
		t.Fatalf("a worker created without labels_locked: %s", r.Body)
	}
	a := e.newAgent(r.JSON["worker_id"].(string), r.JSON["token"].(string), 2)
	e.Must(a.register(map[string]any{"labels": map[string]string{"tier": "secure"}, "gpu_info": gpus(1)}), 200)
	e.Must(a.register(map[string]any{"labels": map[string]string{"tier": "secure"}, "gpu_info": gpus(8)}), 200)
	w := e.Worker(a.id)
	if l := w["labels"].(map[string]any); w["labels_locked"] != true || len(l) != 1 || l["pool"] != "general" || w["gpu_count"] != float64(1) {
		t.Fatalf("the default worker took its reports: locked %v, labels %v, %v GPUs", w["labels_locked"], l, w["gpu_count"])
	}

	r = e.Must(e.AdminDo("POST", "/api/admin/workers", map[string]any{"name": "trusted", "labels_locked": false}), 201)
	if r.JSON["labels_locked"] != false {
		t.Fatalf("a worker created with labels_locked false: %s", r.Body)
	}
	b := e.newAgent(r.JSON["worker_id"].(string), r.JSON["token"].(string), 2)
	e.Must(b.register(map[string]any{"labels": map[string]string{"tier": "secure"}, "gpu_info": gpus(1)}), 200)
	e.Must(b.register(map[string]any{"labels": map[string]string{"tier": "secure"}, "gpu_info": gpus(8)}), 200)
	if w := e.Worker(b.id); w["labels"].(map[string]any)["tier"] != "secure" || w["gpu_count"] != float64(8) {
		t.Fatalf("the unlocked worker: labels %v, %v GPUs", w["labels"], w["gpu_count"])
	}
}

func containsJSON(raw json.RawMessage, key, want string) bool {
	var d map[string]json.RawMessage
	return json.Unmarshal(raw, &d) == nil && string(d[key]) == want
}

// What the documentation says of the scopes: admin.workers is worth every
// job's secrets (its holder makes a worker, and the worker is handed a job
// with its hf_token), while no queue scope ever shows a job's secrets.
func TestAdminWorkersScopeReachesJobSecrets(t *testing.T) {
	t.Parallel()
	e := setup(t, backends["sqlite"](t))
	token := func(scope string) map[string]string {
		r := e.Must(e.AdminDo("POST", "/api/admin/tokens", map[string]any{"name": scope, "scopes": []string{scope}}), 201)
		return map[string]string{"Authorization": "Bearer " + r.JSON["token"].(string)}
	}
	job := e.Submit(map[string]any{"hf_token": "hf_job_secret"})
	view := e.Must(e.Do("GET", "/api/queue/"+job, token("queue.view"), nil), 200)
	if strings.Contains(string(view.Body), "hf_job_secret") {
		t.Fatalf("queue.view shows the job's hf_token: %s", view.Body)
	}
	w := e.Must(e.Do("POST", "/api/admin/workers", token("admin.workers"), map[string]any{"name": "made", "worker_type": "persistent"}), 201)
	a := e.newAgent(w.JSON["worker_id"].(string), w.JSON["token"].(string), 2)
	e.Must(a.register(map[string]any{"name": "made"}), 200)
	a.connect()
	a.keepAlive(a.held)
	if ev := a.next("job_submit", eventWait); ev["job_id"] != job || ev["hf_token"] != "hf_job_secret" {
		t.Fatalf("the admin.workers token's worker got %v", ev)
	}
}
