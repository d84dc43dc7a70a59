package orchestrator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/adminapi"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/orchtest"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
	"github.com/simpletuner/simpletuner-orchestration/internal/version"
)

// TestUpstreamAgentReplay replays the exact request sequence of SimpleTuner's
// Python agent (protocol 1) and reads our SSE the way it does.
func TestUpstreamAgentReplay(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		// The replay heartbeats only where the script says: a loaded machine
		// must not make the worker look lost between two steps.
		e := setup(t, open(t), patientHeartbeats)
		id, token := e.CreateWorker("gpu-worker-1", "ephemeral", map[string]string{"location": "dc-a"})
		a := e.newAgent(id, token, 1)
		r := e.Must(a.register(nil), 200)
		if r.JSON["worker_id"] != id || !strings.Contains(r.JSON["sse_url"].(string), "/api/workers/stream") ||
			r.JSON["resume_job"] != nil || r.JSON["abandon_job"] != nil {
			t.Fatalf("register reply: %s", r.Body)
		}
		if _, ext := r.JSON["protocol"]; ext {
			t.Fatalf("protocol-1 client got protocol-2 fields: %s", r.Body)
		}
		a.connect()
		e.Must(a.heartbeat("idle", nil, nil), 200)

		jobID := e.Submit(map[string]any{"config": map[string]any{"--model_type": "lora"}, "target": "worker"})
		ev := a.next("job_submit", eventWait)
		if ev["job_id"] != jobID {
			t.Fatalf("job_submit for %v, want %s", ev["job_id"], jobID)
		}
		if _, ok := ev["config"].(map[string]any); !ok {
			t.Fatalf("config must be an object: %v", ev)
		}
		for _, k := range []string{"upload_endpoint", "upload_token", "provider"} {
			if _, ok := ev[k].(string); !ok {
				t.Fatalf("%s must be a string (never null): %v", k, ev)
			}
		}
		if ev["provider"] == "kubeflow" {
			t.Fatal("provider must not be kubeflow")
		}
		e.Must(a.report(jobID, "starting", nil), 200)
		e.Must(a.report(jobID, "training", nil), 200)
		e.Must(a.heartbeat("busy", jobID, nil), 200)
		if got := e.Job(jobID)["status"]; got != "running" {
			t.Fatalf("job is %v, want running", got)
		}
		e.Must(a.report(jobID, "completed", map[string]any{"progress": map[string]any{"step": 10}}), 200)
		e.Must(a.report(jobID, "completed", nil), 200) // idempotent
		if got := e.Job(jobID)["status"]; got != "completed" {
			t.Fatalf("job is %v, want completed", got)
		}
		q := e.Must(e.Do("GET", "/api/workers/queue?worker_id="+id, a.hdr(), nil), 200)
		if q.JSON["has_jobs"] != false {
			t.Fatalf("queue check: %s", q.Body)
		}
		e.Must(e.Do("POST", "/api/workers/disconnect", a.hdr(), map[string]any{"worker_id": id}), 200)
		w := e.Worker(id)
		if w["status"] != "offline" || w["connected"] != false {
			t.Fatalf("after disconnect: %v", w)
		}
		// Admin-chosen labels and type survived a registration that sent none.
		if w["worker_type"] != "ephemeral" || w["labels"].(map[string]any)["location"] != "dc-a" {
			t.Fatalf("admin labels/type lost: %v", w)
		}
		if w["gpu_count"] != float64(2) || w["gpu_name"] != "NVIDIA A100-SXM4-80GB" {
			t.Fatalf("gpu fields: %v", w)
		}
	})
}

func TestRegisterErrors(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t))
		id, token := e.CreateWorker("w", "persistent", nil)
		cases := []struct {
			name    string
			headers map[string]string
			body    any
			status  int
			code    string
		}{
			{"no token", nil, `{"name":"x"}`, 401, "invalid_token"},
			{"unknown token", map[string]string{"X-Worker-Token": "wt_nope"}, `{"name":"x"}`, 401, "invalid_token"},
			{"malformed json", map[string]string{"X-Worker-Token": token}, `{"name":`, 400, "invalid_json"},
			{"not an object", map[string]string{"X-Worker-Token": token}, `[1,2]`, 422, "invalid_request"},
			{"wrong type", map[string]string{"X-Worker-Token": token}, `{"name": 5}`, 422, "invalid_request"},
			{"missing name", map[string]string{"X-Worker-Token": token}, `{"persistent": true}`, 422, "invalid_request"},
			{"bad gpu_info", map[string]string{"X-Worker-Token": token}, `{"name":"x","gpu_info":[1]}`, 422, "invalid_request"},
			{"too large", map[string]string{"X-Worker-Token": token}, `{"name":"` + strings.Repeat("a", 2<<20) + `"}`, 413, "request_too_large"},
		}
		for _, c := range cases {
			r := e.Do("POST", "/api/workers/register", c.headers, c.body)
			if r.Status != c.status || r.JSON["error"] != c.code || r.JSON["detail"] == "" {
				t.Errorf("%s: got %d %s, want %d %s", c.name, r.Status, r.Body, c.status, c.code)
			}
		}
		if r := e.Do("POST", "/api/workers/register", map[string]string{"X-Worker-Token": token}, `{"name": 5}`); !strings.Contains(r.JSON["detail"].(string), `"name"`) {
			t.Errorf("422 must name the field: %s", r.Body)
		}
		// Nothing changed: the worker is still as created.
		if w := e.Worker(id); w["status"] != "connecting" || w["name"] != "w" {
			t.Fatalf("rejected requests changed the worker: %v", w)
		}
	})
}

func TestHeartbeatNeverUndoesDrainOrStoresUnknownStatus(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t))
		a := e.startAgent("w1", nil, nil)
		e.Must(a.heartbeat("training", nil, nil), 200)
		if got := e.Worker(a.id)["status"]; got != "idle" {
			t.Fatalf("unknown heartbeat status stored: %v", got)
		}
		e.Must(e.AdminDo("POST", "/api/admin/workers/"+a.id+"/drain", nil), 200)
		a.next("drain", eventWait)
		r := e.Must(a.heartbeat("idle", nil, nil), 200)
		if r.JSON["drain"] != true {
			t.Fatalf("heartbeat reply must repeat the drain: %s", r.Body)
		}
		if got := e.Worker(a.id)["status"]; got != "draining" {
			t.Fatalf("heartbeat undid drain: %v", got)
		}
		e.Must(e.AdminDo("POST", "/api/admin/workers/"+a.id+"/resume", nil), 200)
		if got := e.Worker(a.id)["status"]; got != "idle" {
			t.Fatalf("resume: %v", got)
		}
		e.Must(e.AdminDo("POST", "/api/admin/workers/"+a.id+"/resume", nil), 409)
		// Mismatched worker id.
		other, _ := e.CreateWorker("w2", "persistent", nil)
		if r := e.Do("POST", "/api/workers/heartbeat", a.hdr(), map[string]any{"worker_id": other, "status": "idle"}); r.Status != 400 {
			t.Fatalf("mismatch: %d", r.Status)
		}
	})
}

func TestResumeCoversTrainingAndAbandonsOthers(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t))
		a := e.startAgent("w1", nil, nil)
		a.protocol = 1
		jobID := e.Submit(map[string]any{})
		a.next("job_submit", eventWait)
		e.Must(a.report(jobID, "starting", nil), 200)
		e.Must(a.report(jobID, "training", nil), 200)
		// The stream drops and the agent re-registers, still training.
		r := e.Must(a.register(map[string]any{"current_job_id": jobID}), 200)
		rj, _ := r.JSON["resume_job"].(map[string]any)
		if rj == nil || rj["job_id"] != jobID || r.JSON["abandon_job"] != nil {
			t.Fatalf("training job not resumed: %s", r.Body)
		}
		// Registering closed the old stream; the agent opens its new one
		// (without it, a late heartbeat shows the worker disconnected).
		a.connect()
		if w := e.Worker(a.id); w["status"] != "busy" || w["current_job_id"] != jobID {
			t.Fatalf("resumed worker must be busy with its job: %v", w)
		}
		e.Must(a.report(jobID, "completed", nil), 200)
		// Reporting a finished job on registration → abandon.
		r = e.Must(a.register(map[string]any{"current_job_id": jobID}), 200)
		if r.JSON["abandon_job"] != jobID || r.JSON["resume_job"] != nil {
			t.Fatalf("finished job must be abandoned: %s", r.Body)
		}
		if got := e.Job(jobID)["status"]; got != "completed" {
			t.Fatalf("abandon overwrote a terminal job: %v", got)
		}
	})
}

func TestReplacedStreamCleanupKeepsSuccessor(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t))
		a := e.startAgent("w1", nil, nil)
		first := a.closed
		a.connect() // second stream replaces the first
		select {
		case <-first:
		case <-time.After(5 * time.Second):
			t.Fatal("replaced stream was not closed")
		}
		time.Sleep(100 * time.Millisecond) // let the old handler's cleanup run
		if !e.srv.Hub().Connected(a.id) || e.Worker(a.id)["connected"] != true {
			t.Fatal("old stream's cleanup unregistered the new one")
		}
		jobID := e.Submit(map[string]any{})
		if ev := a.next("job_submit", eventWait); ev["job_id"] != jobID {
			t.Fatal("new stream got no job")
		}
	})
}

func TestTokenRotationAndDeleteCloseStream(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t))
		a := e.startAgent("w1", nil, nil)
		r := e.Must(e.AdminDo("POST", "/api/admin/workers/"+a.id+"/token", nil), 200)
		newToken := r.JSON["token"].(string)
		if cmd := r.JSON["connection_command"].(string); !strings.HasPrefix(cmd, adminapi.ConnectionPrompt) || strings.Contains(cmd, newToken) {
			t.Fatalf("connection_command: %s", r.Body)
		}
		select {
		case <-a.closed:
		case <-time.After(5 * time.Second):
			t.Fatal("stream still open 5 s after rotation")
		}
		if r := a.heartbeat("idle", nil, nil); r.Status != 401 {
			t.Fatalf("old token still works: %d", r.Status)
		}
		a.token = newToken
		e.Must(a.register(nil), 200)
		a.connect()
		a.keepAlive(a.held)
		// Delete refuses a live worker, force closes its stream with shutdown.
		e.Must(e.AdminDo("DELETE", "/api/admin/workers/"+a.id, nil), 409)
		e.Must(e.AdminDo("DELETE", "/api/admin/workers/"+a.id+"?force=true", nil), 200)
		select {
		case <-a.closed:
		case <-time.After(5 * time.Second):
			t.Fatal("stream still open 5 s after delete")
		}
		e.Must(e.AdminDo("GET", "/api/admin/workers/"+a.id, nil), 404)
		if r := a.heartbeat("idle", nil, nil); r.Status != 401 {
			t.Fatalf("deleted worker revived by heartbeat: %d", r.Status)
		}
	})
}

func TestAdminWorkersAPI(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t))
		idA, _ := e.CreateWorker("a", "persistent", map[string]string{"gpu_type": "a100"})
		e.startAgent("b", nil, nil)
		list := e.Must(e.AdminDo("GET", "/api/admin/workers", nil), 200)
		if list.JSON["total"] != float64(2) {
			t.Fatalf("list: %s", list.Body)
		}
		for status, want := range map[string]float64{"idle": 1, "connecting": 1, "busy": 0} {
			r := e.Must(e.AdminDo("GET", "/api/admin/workers?status="+status, nil), 200)
			if r.JSON["total"] != want {
				t.Errorf("status=%s: total %v, want %v", status, r.JSON["total"], want)
			}
		}
		if r := e.Must(e.AdminDo("GET", "/api/admin/workers?status_filter=idle", nil), 200); r.JSON["total"] != float64(1) {
			t.Errorf("status_filter: %s", r.Body)
		}
		e.Must(e.AdminDo("GET", "/api/admin/workers?status=bogus", nil), 422)
		e.Must(e.AdminDo("POST", "/api/admin/workers", map[string]any{"worker_type": "persistent"}), 422)
		e.Must(e.AdminDo("POST", "/api/admin/workers", map[string]any{"name": "x", "worker_type": "spot"}), 422)
		e.Must(e.AdminDo("POST", "/api/admin/workers", map[string]any{"name": "x", "labels": map[string]any{"k": 1}}), 422)
		p := e.Must(e.AdminDo("PATCH", "/api/admin/workers/"+idA, map[string]any{"name": "a2", "labels": map[string]string{"team": "nlp"}}), 200)
		if p.JSON["name"] != "a2" || p.JSON["labels"].(map[string]any)["team"] != "nlp" {
			t.Fatalf("patch: %s", p.Body)
		}
		for _, path := range []string{"/api/admin/workers/w_nope", "/api/admin/workers/w_nope/drain", "/api/admin/workers/w_nope/token"} {
			method := "POST"
			if path == "/api/admin/workers/w_nope" {
				method = "GET"
			}
			if r := e.AdminDo(method, path, nil); r.Status != 404 || r.JSON["error"] != "not_found" {
				t.Errorf("%s %s: %d %s", method, path, r.Status, r.Body)
			}
		}
		e.Must(e.AdminDo("DELETE", "/api/admin/workers/"+idA, nil), 200) // never connected → deletable
	})
}

// A worker that runs nothing and is out of touch may be deleted without
// force, whatever an admin set: one drained (and resumed, which leaves it
// never connected) before it ever connected, and one drained that then went
// away. One in touch needs force; the refusal names no client's flag.
func TestDeleteWorkerOutOfTouch(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t))
		id, _ := e.CreateWorker("new", "persistent", nil)
		path := "/api/admin/workers/" + id
		if r := e.Must(e.AdminDo("POST", path+"/drain", nil), 200); r.JSON["status"] != "draining" {
			t.Fatalf("drain: %s", r.Body)
		}
		if r := e.Must(e.AdminDo("POST", path+"/resume", nil), 200); r.JSON["status"] != "connecting" {
			t.Fatalf("resume of a worker that never connected: %s", r.Body)
		}
		if r := e.Must(e.AdminDo("GET", path, nil), 200); r.JSON["status"] != "connecting" {
			t.Fatalf("after resume: %s", r.Body)
		}
		e.Must(e.AdminDo("POST", path+"/drain", nil), 200)
		e.Must(e.AdminDo("DELETE", path, nil), 200)

		a := e.startAgent("away", nil, nil)
		path = "/api/admin/workers/" + a.id
		e.Must(e.AdminDo("POST", path+"/drain", nil), 200)
		r := e.Must(e.AdminDo("DELETE", path, nil), 409)
		if d := r.JSON["detail"].(string); !strings.Contains(d, "draining and in touch") || strings.Contains(d, "?force") {
			t.Errorf("refusal: %s", d)
		}
		a.silence()
		a.cancel()
		testutil.Eventually(t, eventWait, "the drained worker deletable once out of touch", func() bool {
			return e.AdminDo("DELETE", path, nil).Status == 200
		})
	})
}

// A type mismatch is logged only when the worker's configuration sets its
// type: a workerd that leaves it unset adopts the admin's from the reply.
func TestTypeMismatchLoggedOnlyForAWorkersOwnType(t *testing.T) {
	t.Parallel()
	e := setup(t, backends["sqlite"](t))
	const warning = "sets another type than an admin gave it"
	for _, c := range []struct {
		name string
		caps map[string]any
		warn bool
	}{
		{"adopts", map[string]any{"isolation": "cgroup"}, false},
		{"owns", map[string]any{"isolation": "cgroup", "own_type": true}, true},
	} {
		id, token := e.CreateWorker(c.name, "persistent", nil)
		before := strings.Count(e.logs.String(), warning)
		e.Must(e.newAgent(id, token, 2).register(map[string]any{"name": c.name, "persistent": false, "capabilities": c.caps}), 200)
		if warned := strings.Count(e.logs.String(), warning) > before; warned != c.warn {
			t.Errorf("%s: warned %v, want %v\n%s", c.name, warned, c.warn, e.logs.String())
		}
	}
}

// Worker names an admin gives are unique, so that a name finds one worker: a
// create or a rename to a name another worker has is refused.
func TestWorkerNamesAreUnique(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t))
		first, _ := e.CreateWorker("gpu-1", "persistent", nil)
		r := e.Must(e.AdminDo("POST", "/api/admin/workers", map[string]any{"name": " gpu-1 "}), 409)
		if d := r.JSON["detail"].(string); !strings.Contains(d, first) || !strings.Contains(d, `"gpu-1"`) {
			t.Errorf("create with a taken name: %s", d)
		}
		second, _ := e.CreateWorker("gpu-2", "persistent", nil)
		e.Must(e.AdminDo("PATCH", "/api/admin/workers/"+second, map[string]any{"name": "gpu-1"}), 409)
		e.Must(e.AdminDo("PATCH", "/api/admin/workers/"+first, map[string]any{"name": "gpu-1"}), 200) // its own name
		list := e.Must(e.AdminDo("GET", "/api/admin/workers", nil), 200)
		if list.JSON["total"] != float64(2) {
			t.Fatalf("workers: %s", list.Body)
		}
	})
}

func TestAdminAuthScopesAndRateLimit(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t), func(o *orchestrator.Options) { o.AuthFailuresPerMinute = 3 })
		if r := e.Do("GET", "/api/admin/workers", nil, nil); r.Status != 401 || r.JSON["error"] != "unauthorized" {
			t.Fatalf("no credential: %d %s", r.Status, r.Body)
		}
		r := e.Must(e.AdminDo("POST", "/api/admin/tokens", map[string]any{"name": "viewer", "scopes": []string{"queue.view"}}), 201)
		viewer := r.JSON["token"].(string)
		if r := e.Do("GET", "/api/queue", map[string]string{"X-API-Key": viewer}, nil); r.Status != 200 {
			t.Fatalf("viewer on queue: %d", r.Status)
		}
		if r := e.Do("GET", "/api/admin/workers", map[string]string{"X-API-Key": viewer}, nil); r.Status != 403 || !strings.Contains(r.JSON["detail"].(string), "admin.workers") {
			t.Fatalf("viewer on admin: %d %s", r.Status, r.Body)
		}
		e.Must(e.AdminDo("POST", "/api/admin/tokens", map[string]any{"name": "bad", "scopes": []string{"root"}}), 422)
		// Failures from one address are limited; a valid credential still passes.
		var last orchtest.Reply
		for range 6 {
			last = e.Do("GET", "/api/admin/workers", map[string]string{"Authorization": "Bearer sta_wrong"}, nil)
		}
		if last.Status != 429 || last.Header.Get("Retry-After") == "" {
			t.Fatalf("want 429 with Retry-After, got %d %v", last.Status, last.Header)
		}
		e.Must(e.AdminDo("GET", "/api/admin/workers", nil), 200)
		// Revoked tokens stop working.
		id := r.JSON["id"].(string)
		e.Must(e.AdminDo("DELETE", "/api/admin/tokens/"+id, nil), 200)
		if r := e.Do("GET", "/api/queue", map[string]string{"X-API-Key": viewer}, nil); r.Status != 401 && r.Status != 429 {
			t.Fatalf("revoked token: %d", r.Status)
		}
	})
}

func TestAuditChainAndNoTokenInLogs(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t))
		a := e.startAgent("w1", nil, nil)
		jobID := e.Submit(map[string]any{"hf_token": "hf_secretvalue123"})
		ev := a.next("job_submit", eventWait)
		e.Must(a.report(jobID, "starting", nil), 200)
		e.Must(a.report(jobID, "completed", nil), 200)
		rot := e.Must(e.AdminDo("POST", "/api/admin/workers/"+a.id+"/token", nil), 200)
		e.Do("POST", "/api/workers/register", map[string]string{"X-Worker-Token": "wt_badbadbad"}, map[string]any{"name": "x"})
		testutil.Eventually(t, eventWait, "the failure audited", func() bool {
			return strings.Contains(string(e.Must(e.AdminDo("GET", "/api/admin/audit?limit=1000", nil), 200).Body), `"auth.failure"`)
		})

		r := e.Must(e.AdminDo("GET", "/api/admin/audit?limit=1000", nil), 200)
		var body struct{ Records []audit.Record }
		if err := json.Unmarshal(r.Body, &body); err != nil {
			t.Fatal(err)
		}
		if err := audit.Verify(body.Records); err != nil {
			t.Fatalf("audit chain: %v", err)
		}
		actions := map[string]int{}
		for _, rec := range body.Records {
			actions[rec.Action+"/"+rec.Outcome]++
		}
		for _, want := range []string{"worker.create/success", "worker.register/success", "auth.failure/failure",
			"job.submit/success", "job.dispatch/success", "job.transition/success", "worker.token_rotate/success"} {
			if actions[want] == 0 {
				t.Errorf("no audit record %s in %v", want, actions)
			}
		}
		// Secrets appear nowhere: not in logs, audit or job views.
		job := e.Must(e.AdminDo("GET", "/api/queue/"+jobID, nil), 200)
		secrets := []string{a.token, rot.JSON["token"].(string), e.Admin, ev["upload_token"].(string), "hf_secretvalue123"}
		for _, s := range secrets {
			for where, text := range map[string]string{"log": e.logs.String(), "audit": string(r.Body), "job": string(job.Body)} {
				if strings.Contains(text, s) {
					t.Errorf("secret %.8s… found in %s", s, where)
				}
			}
		}
	})
}

func TestHealthzReadyzMetrics(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(t testing.TB) store.Store) {
		st := open(t)
		e := setup(t, st)
		h := e.Must(e.Do("GET", "/healthz", nil, nil), 200)
		if h.JSON["status"] != "ok" || h.JSON["version"] != version.Version || h.JSON["store"] != st.Kind() {
			t.Errorf("healthz: %s; want the version %q and the store %q", h.Body, version.Version, st.Kind())
		}
		e.Must(e.Do("GET", "/readyz", nil, nil), 200)
		rec := &testutil.Buffer{}
		e.srv.WriteMetrics(context.Background(), rec)
		buildInfo := fmt.Sprintf("simpletuner_build_info{version=%q,store=%q} 1\n", version.Version, st.Kind())
		for _, m := range []string{"simpletuner_queue_depth", "simpletuner_workers{status=\"idle\"}", "simpletuner_dispatch_latency_seconds_bucket",
			"simpletuner_heartbeats_total", "simpletuner_stale_attempt_rejections_total", "simpletuner_sse_connections", "simpletuner_auth_failures_total",
			buildInfo} {
			if !strings.Contains(rec.String(), m) {
				t.Errorf("metrics lack %s", m)
			}
		}
		e.srv.BeginShutdown()
		if r := e.Do("GET", "/readyz", nil, nil); r.Status != http.StatusServiceUnavailable {
			t.Fatalf("readyz while stopping: %d", r.Status)
		}
	})
}

// A worker that drains on its own (a stop signal) says so in its heartbeat:
// it gets no new job from then on, the drain is audited, and going offline
// (it leaves once drained) ends it, so that it takes jobs again after a restart.
func TestWorkerOwnDrainStopsDispatch(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t))
		a := e.startAgent("w1", nil, nil)
		e.Must(a.heartbeat("draining", nil, nil), 200)
		if got := e.Worker(a.id)["status"]; got != "draining" {
			t.Fatalf("status after a draining heartbeat: %v", got)
		}
		job := e.Submit(map[string]any{})
		a.noEvent("job_submit", 500*time.Millisecond)
		if st := e.Job(job)["status"]; st != "queued" {
			t.Fatalf("a job went to a worker draining on its own: %v", st)
		}
		r := e.Must(e.AdminDo("GET", "/api/admin/audit?action=worker.drain&target="+a.id, nil), 200)
		if recs := r.JSON["records"].([]any); len(recs) != 1 || recs[0].(map[string]any)["actor"] != "worker:"+a.id {
			t.Fatalf("worker.drain audit: %v", recs)
		}
		a.silence() // the agent's own heartbeats would bring it back
		e.Must(e.Do("POST", "/api/workers/disconnect", a.hdr(), map[string]any{"worker_id": a.id}), 200)
		testutil.Eventually(t, eventWait, "the drained worker offline once it left", func() bool { return e.Worker(a.id)["status"] == "offline" })
	})
}

// The queue check an ephemeral worker makes before it leaves says whether a
// queued job could run on it, by target, GPUs and labels.
func TestQueueCheckSeesOnlyJobsThatFit(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t))
		id, token := e.CreateWorker("leaving", "ephemeral", map[string]string{"zone": "eu-west"})
		a := e.newAgent(id, token, 2)
		e.Must(a.register(nil), 200) // no stream: nothing is dispatched to it
		check := func() any {
			t.Helper()
			return e.Must(e.Do("GET", "/api/workers/queue?worker_id="+id, a.hdr(), nil), 200).JSON["has_jobs"]
		}
		e.Submit(map[string]any{"worker_labels": map[string]string{"zone": "us-*"}})
		e.Submit(map[string]any{"worker_labels": map[string]string{"zone": "eu-*"}, "gpu_count": 4})
		if got := check(); got != false {
			t.Fatalf("has_jobs %v with only jobs for other zones or more GPUs", got)
		}
		e.Submit(map[string]any{"worker_labels": map[string]string{"zone": "eu-*"}})
		if got := check(); got != true {
			t.Fatalf("has_jobs %v with a queued job for its zone", got)
		}
	})
}

// An event queued just before its stream is closed still reaches the worker:
// a job_submit handed over right before a shutdown must not be lost.
func TestQueuedEventSurvivesClose(t *testing.T) {
	t.Parallel()
	e := setup(t, backends["sqlite"](t), func(o *orchestrator.Options) { o.SchedulerInterval = time.Hour })
	for i := range 20 {
		id, token := e.CreateWorker(fmt.Sprintf("w%d", i), "persistent", nil)
		a := e.newAgent(id, token, 2)
		e.Must(a.register(nil), 200)
		a.connect()
		if !e.srv.Hub().Send(id, protocol.EventDrain, protocol.DrainEvent{Type: protocol.EventDrain, Reason: fmt.Sprint(i)}) {
			t.Fatal("send failed")
		}
		e.srv.Hub().Close(id, "shutting down")
		if ev := a.next(protocol.EventDrain, 5*time.Second); ev["reason"] != fmt.Sprint(i) {
			t.Fatalf("got %v", ev)
		}
	}
}
