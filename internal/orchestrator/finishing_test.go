package orchestrator_test

import (
	"strings"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/adminapi"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/orchtest"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
)

// A running attempt left out of one heartbeat is not lost; left out of two in
// a row it is. An attempt listed as finishing (process ended, report on the
// way) counts as present, and is not told to cancel.
func TestHeartbeatAbsenceNeedsTwoMisses(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t), func(o *orchestrator.Options) { o.HeartbeatTimeout = time.Minute })
		id, token := e.CreateWorker("w", "persistent", nil)
		a := e.newAgent(id, token, 2)
		e.Must(a.register(nil), 200)
		a.connect()
		jobID := e.Submit(map[string]any{"config": map[string]any{}})
		a.next("job_submit", eventWait)
		e.Must(a.report(jobID, "starting", map[string]any{"attempt": 1}), 200)

		beat := func(running ...map[string]any) orchtest.Reply {
			t.Helper()
			if running == nil {
				running = []map[string]any{}
			}
			return e.Must(a.heartbeat("busy", nil, map[string]any{"running": running}), 200)
		}
		status := func() any { return e.Job(jobID)["status"] }

		beat() // first miss: noted only
		if s := status(); s != "running" {
			t.Fatalf("after one heartbeat without the attempt the job is %v, want running", s)
		}
		finishing := map[string]any{"job_id": jobID, "attempt": 1, "state": "finishing", "outcome": "completed"}
		r := beat(finishing)
		if c, _ := r.JSON["cancel"].([]any); len(c) != 0 {
			t.Fatalf("a finishing attempt was told to cancel: %s", r.Body)
		}
		beat() // the miss before was interrupted by the finishing listing: a first miss again
		if s := status(); s != "running" {
			t.Fatalf("after finishing, then one miss, the job is %v, want running", s)
		}
		beat() // second miss in a row: lost
		// Lost and requeued; the scheduler may already have dispatched it again.
		j := e.Job(jobID)
		if at := j["attempts"].([]any); at[0].(map[string]any)["outcome"] != "worker_lost" || j["retries_used"] != float64(1) {
			t.Fatalf("after two heartbeats in a row without the attempt: status %v, attempts %v; want attempt 1 worker_lost, one retry spent", j["status"], at)
		}
	})
}

// A refused credential says what is wrong with it when its shape shows it.
func TestRefusedTokensSayWhy(t *testing.T) {
	t.Parallel()
	st := backends["sqlite"](t)
	e := setup(t, st, func(o *orchestrator.Options) { o.AuthFailuresPerMinute = 100 })
	_, token := e.CreateWorker("w", "persistent", nil)
	flipped := []byte(token)
	flipped[8] ^= 1
	for _, c := range []struct {
		path, header, token, says string
	}{
		{"/api/workers/heartbeat", "X-Worker-Token", e.Admin, "this is an admin token (sta_…), not a worker token (wt_…)"},
		{"/api/workers/heartbeat", "X-Worker-Token", string(flipped), "malformed token (checksum)"},
		{"/api/workers/heartbeat", "X-Worker-Token", auth.NewWorkerToken(), "unknown, rotated or revoked"},
		{"/api/admin/workers", "X-API-Key", token, "this is a worker token (wt_…), not an admin token (sta_…)"},
		{"/api/admin/workers", "X-API-Key", auth.NewAdminToken(), "unknown, rotated or revoked"},
	} {
		method := "GET"
		if strings.HasPrefix(c.path, "/api/workers") {
			method = "POST"
		}
		r := e.Do(method, c.path, map[string]string{c.header: c.token}, map[string]any{"worker_id": "w"})
		detail, _ := r.JSON["detail"].(string)
		if r.Status != 401 || !strings.Contains(detail, c.says) || strings.Contains(string(r.Body), c.token) {
			t.Errorf("%s with %s: %d %s; want 401 saying %q", c.path, auth.Accessor(c.token), r.Status, r.Body, c.says)
		}
	}
}

// A worker whose stream closed and whose heartbeats stopped looks
// disconnected at once (not idle until the heartbeat timeout), and an admin
// may delete it without force when it holds no job.
func TestGoneWorkerLooksGone(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t), func(o *orchestrator.Options) { o.HeartbeatTimeout = time.Minute })
		busy := e.startAgent("busy", nil, nil)
		jobID := e.Submit(map[string]any{"config": map[string]any{}})
		if ev := busy.next("job_submit", eventWait); ev["job_id"] != jobID {
			t.Fatalf("job went elsewhere: %v", ev)
		}
		// The idle worker connects only once the job is out: placement
		// among idle workers has no fixed order.
		idle := e.startAgent("idle", nil, nil)
		for _, a := range []*agent{busy, idle} {
			a.silence()
			a.cancel()
		}
		testutil.Eventually(t, eventWait, "both shown disconnected", func() bool {
			return e.Worker(busy.id)["status"] == "disconnected" && e.Worker(idle.id)["status"] == "disconnected"
		})
		if w := e.Worker(idle.id); w["connected"] != false {
			t.Fatalf("disconnected worker: %v", w)
		}
		r := e.AdminDo("DELETE", "/api/admin/workers/"+busy.id, nil)
		if r.Status != 409 || !strings.Contains(r.JSON["detail"].(string), jobID) {
			t.Fatalf("deleting a disconnected worker that holds a job: %d %s", r.Status, r.Body)
		}
		e.Must(e.AdminDo("DELETE", "/api/admin/workers/"+idle.id, nil), 200)
		if j := e.Job(jobID); j["status"] != "dispatched" && j["status"] != "running" {
			t.Fatalf("the held job changed: %v", j["status"])
		}
	})
}

// PATCH labels is a JSON merge-patch: given keys are added or replaced, a
// null removes one, the rest stay; reported labels an admin never owned stay.
func TestPatchLabelsMerges(t *testing.T) {
	t.Parallel()
	e := setup(t, backends["sqlite"](t))
	id, token := e.CreateWorker("w", "persistent", map[string]string{"team": "nlp", "zone": "eu"})
	a := e.newAgent(id, token, 2)
	e.Must(a.register(map[string]any{"labels": map[string]string{"cuda": "12.4"}}), 200)
	labels := func(r orchtest.Reply) map[string]any { return r.JSON["labels"].(map[string]any) }
	r := e.Must(e.AdminDo("PATCH", "/api/admin/workers/"+id, map[string]any{"labels": map[string]any{"zone": "us", "tier": "gold"}}), 200)
	if l := labels(r); l["team"] != "nlp" || l["zone"] != "us" || l["tier"] != "gold" || l["cuda"] != "12.4" {
		t.Fatalf("after adding and replacing: %v", l)
	}
	r = e.Must(e.AdminDo("PATCH", "/api/admin/workers/"+id, map[string]any{"labels": map[string]any{"team": nil}}), 200)
	if l := labels(r); l["team"] != nil || l["zone"] != "us" || l["tier"] != "gold" || l["cuda"] != "12.4" {
		t.Fatalf("after removing team: %v", l)
	}
	if r := e.AdminDo("PATCH", "/api/admin/workers/"+id, map[string]any{"labels": map[string]any{"x": 5}}); r.Status != 422 {
		t.Fatalf("a number as a label value: %d %s", r.Status, r.Body)
	}
}

// A queued job says why it waits.
func TestWaitingReasons(t *testing.T) {
	t.Parallel()
	e := setup(t, backends["sqlite"](t), func(o *orchestrator.Options) { o.SchedulerInterval = time.Hour })
	reason := func(id string) string { r, _ := e.Job(id)["waiting_reason"].(string); return r }
	huge := e.Submit(map[string]any{"config": map[string]any{}, "gpu_count": 64})
	if reason(huge) != adminapi.WaitNoWorkerLargeEnough {
		t.Fatalf("64-GPU job with no workers: %q", reason(huge))
	}
	r := e.Must(e.AdminDo("POST", "/api/queue/submit", map[string]any{"config": map[string]any{}, "gpu_count": 64}), 201)
	if w, _ := r.JSON["warning"].(string); !strings.Contains(w, "asks for 64 GPUs") {
		t.Fatalf("submit reply: %s", r.Body)
	}
	labelled := e.Submit(map[string]any{"config": map[string]any{}, "worker_labels": map[string]string{"site": "mars"}})
	id, _ := e.CreateWorker("w", "persistent", map[string]string{"site": "earth"})
	if reason(labelled) != adminapi.WaitNoMatchingWorker {
		t.Fatalf("labelled job: %q", reason(labelled))
	}
	plain := e.Submit(map[string]any{"config": map[string]any{}})
	if reason(plain) != adminapi.WaitNoneOnline {
		t.Fatalf("job with a matching worker never connected (%s): %q", id, reason(plain))
	}
	if !strings.Contains(e.Job(plain)["waiting_detail"].(string), "none connected") {
		t.Fatalf("detail: %v", e.Job(plain)["waiting_detail"])
	}
	if _, has := e.Job(plain)["waiting_reason"]; !has {
		t.Fatal("no waiting_reason")
	}
	// Asked to, the list says the same of each queued job, and nothing of
	// the others; unasked, it reads no worker and says nothing.
	e.Must(e.Queue("waiting=maybe"), 422)
	for _, raw := range e.Must(e.Queue(""), 200).JSON["entries"].([]any) {
		if _, has := raw.(map[string]any)["waiting_reason"]; has {
			t.Fatalf("a list not asked to explain waits: %v", raw)
		}
	}
	e.Must(e.Cancel(huge), 200)
	entries := e.Must(e.Queue("waiting=1"), 200).JSON["entries"].([]any)
	if len(entries) != 4 {
		t.Fatalf("%d entries", len(entries))
	}
	for _, raw := range entries {
		entry := raw.(map[string]any)
		id := entry["job_id"].(string)
		_, has := entry["waiting_reason"]
		if id == huge {
			if has {
				t.Errorf("the cancelled job has a waiting reason: %v", entry)
			}
			continue
		}
		one := e.Job(id)
		if !has || entry["waiting_reason"] != one["waiting_reason"] || entry["waiting_detail"] != one["waiting_detail"] {
			t.Errorf("%s in the list: %v, %v; alone: %v, %v", id, entry["waiting_reason"], entry["waiting_detail"], one["waiting_reason"], one["waiting_detail"])
		}
	}
}

// While an instance shuts down, acknowledgements, reports and heartbeats
// can no longer reach it: its loops must not judge deadlines or silence. An
// attempt dispatched just before the shutdown stays out for the next
// instance to resume, and its silent worker is not marked offline.
func TestShuttingDownJudgesNoDeadline(t *testing.T) {
	t.Parallel()
	// An acknowledgement deadline short enough to wait out (this test proves
	// that nothing happens), long enough to reach the shutdown before it.
	e := setup(t, backends["sqlite"](t), func(o *orchestrator.Options) { o.AckTimeout = 5 * time.Second })
	a := e.startAgent("w", nil, nil)
	job := e.Submit(map[string]any{})
	a.next("job_submit", eventWait)
	a.silence()
	e.srv.BeginShutdown()
	opt := e.srv.Options()
	time.Sleep(opt.AckTimeout + opt.HeartbeatTimeout + 3*opt.SchedulerInterval)
	if st := e.Job(job)["status"]; st != "dispatched" {
		t.Errorf("an attempt out during shutdown became %v, want dispatched", st)
	}
	if st := e.Worker(a.id)["status"]; st == "offline" {
		t.Errorf("a worker silent during shutdown went offline")
	}
}
