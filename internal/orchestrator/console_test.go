package orchestrator_test

import (
	"database/sql"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
)

func TestWhoamiAndConfigs(t *testing.T) {
	t.Parallel()
	e := setup(t, backends["sqlite"](t))
	dir := e.srv.Options().ConfigsDir
	os.MkdirAll(filepath.Join(dir, "sdxl-lora"), 0o755)
	os.WriteFile(filepath.Join(dir, "sdxl-lora", "config.json"), []byte(`{}`), 0o644)
	os.MkdirAll(filepath.Join(dir, "empty-dir"), 0o755)
	os.WriteFile(filepath.Join(dir, "flux.json"), []byte(`{}`), 0o644)
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte(`x`), 0o644)

	r := e.Must(e.AdminDo("POST", "/api/admin/tokens", map[string]any{"name": "viewer", "scopes": []string{"queue.view"}}), 201)
	viewer := map[string]string{"Authorization": "Bearer " + r.JSON["token"].(string)}
	who := e.Must(e.Do("GET", "/api/auth/whoami", viewer, nil), 200)
	if who.JSON["id"] != r.JSON["id"] || who.JSON["name"] != "viewer" || who.JSON["kind"] != "admin_token" ||
		!strings.Contains(string(who.Body), `"scopes":["queue.view"]`) || strings.Contains(string(who.Body), "sta_") {
		t.Fatalf("whoami: %s", who.Body)
	}
	if r := e.Do("GET", "/api/auth/whoami", map[string]string{"Authorization": "Bearer sta_nope"}, nil); r.Status != 401 {
		t.Fatalf("whoami with a bad token: %d", r.Status)
	}
	e.Must(e.Do("GET", "/api/configs", viewer, nil), 403)
	cfgs := e.Must(e.AdminDo("GET", "/api/configs", nil), 200)
	if got := cfgs.JSON["configs"]; !equalJSON(got, []any{"flux", "sdxl-lora"}) {
		t.Fatalf("configs: %s", cfgs.Body)
	}
}

func equalJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// dbOf reaches the SQL pool under a store, to tamper with it as an attacker with
// database access would.
func dbOf(st store.Store) *sql.DB { return st.(interface{ DB() *sql.DB }).DB() }

func TestAuditFilterAndVerify(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		st := open(t)
		e := setup(t, st)
		a, _ := e.CreateWorker("a", "persistent", nil)
		b, _ := e.CreateWorker("b", "persistent", nil)
		e.Must(e.AdminDo("POST", "/api/admin/workers/"+a+"/drain", nil), 200)
		e.Submit(map[string]any{})

		list := func(q string) []string {
			t.Helper()
			r := e.Must(e.AdminDo("GET", "/api/admin/audit?"+q, nil), 200)
			var out []string
			for _, rec := range r.JSON["records"].([]any) {
				m := rec.(map[string]any)
				out = append(out, m["action"].(string)+":"+m["target_id"].(string))
			}
			return out
		}
		if got := list("order=newest&limit=2"); !equalJSON(got, []string{"job.submit:" + got[0][len("job.submit:"):], "worker.drain:" + a}) {
			t.Fatalf("newest two: %v", got)
		}
		if got := list("action=worker.&target=" + b); !equalJSON(got, []string{"worker.create:" + b}) {
			t.Fatalf("filtered: %v", got)
		}
		e.Must(e.AdminDo("GET", "/api/admin/audit?order=sideways", nil), 422)

		v := e.Must(e.AdminDo("GET", "/api/admin/audit/verify", nil), 200)
		if v.JSON["ok"] != true || v.JSON["checked"] != float64(4) {
			t.Fatalf("verify intact chain: %s", v.Body)
		}
		if _, err := dbOf(st).Exec(`UPDATE audit SET actor = 'admin:mallory' WHERE seq = 3`); err != nil {
			t.Fatal(err)
		}
		v = e.Must(e.AdminDo("GET", "/api/admin/audit/verify", nil), 200)
		if v.JSON["ok"] != false || v.JSON["broken_at"] != float64(3) || !strings.Contains(v.JSON["error"].(string), "record 3") {
			t.Fatalf("verify tampered chain: %s", v.Body)
		}
	})
}

func TestGPUTelemetryAndStats(t *testing.T) {
	t.Parallel()
	e := setup(t, backends["sqlite"](t))
	a := e.startAgent("gpu-box", nil, map[string]any{"name": "NVIDIA A100", "count": 2, "vram_gb": 80})
	e.startAgent("gpu-box-2", nil, map[string]any{"name": "NVIDIA A100", "count": 4, "vram_gb": 80})
	if v := e.Worker(a.id); v["gpu_telemetry"] != nil {
		t.Fatalf("telemetry before any heartbeat carried it: %v", v["gpu_telemetry"])
	}
	gpus := []map[string]any{{"uuid": "GPU-1", "utilization_pct": 97, "memory_used_mib": 70000, "temperature_c": 71}}
	e.Must(a.heartbeat("idle", nil, map[string]any{"gpus": gpus}), 200)
	tel, _ := e.Worker(a.id)["gpu_telemetry"].(map[string]any)
	if tel == nil || !strings.Contains(mustJSON(tel["gpus"]), `"utilization_pct":97`) || tel["at"] == "" {
		t.Fatalf("gpu_telemetry: %v", tel)
	}
	// A heartbeat without numbers keeps the last ones.
	e.Must(a.heartbeat("idle", nil, nil), 200)
	if e.Worker(a.id)["gpu_telemetry"] == nil {
		t.Fatal("a heartbeat without gpus dropped the telemetry")
	}

	id := e.Submit(map[string]any{"gpu_count": 2})
	var busy string
	testutil.Eventually(t, eventWait, "job dispatched", func() bool {
		j := e.Job(id)
		busy, _ = j["worker_id"].(string)
		return j["status"] == "dispatched"
	})
	st := e.Must(e.AdminDo("GET", "/api/queue/stats", nil), 200)
	wantInUse := 2.0
	if busy != a.id {
		wantInUse = 4
	}
	g := st.JSON["gpus"].([]any)[0].(map[string]any)
	if g["model"] != "NVIDIA A100" || g["total"] != 6.0 || g["in_use"] != wantInUse || g["vram_gb"] != 80.0 {
		t.Fatalf("stats gpus: %s", st.Body)
	}
	if recent := st.JSON["last_24h"].(map[string]any); recent["completed"] != 0.0 {
		t.Fatalf("last_24h: %v", recent)
	}
	worker := e.agentFor(busy, a)
	e.Must(worker.report(id, "completed", nil), 200)
	st = e.Must(e.AdminDo("GET", "/api/queue/stats", nil), 200)
	if recent := st.JSON["last_24h"].(map[string]any); recent["completed"] != 1.0 {
		t.Fatalf("last_24h after a completion: %v", recent)
	}
	// Without history, by_status holds only the live states.
	live := e.Must(e.AdminDo("GET", "/api/queue/stats?history=0", nil), 200)
	if bs := live.JSON["by_status"].(map[string]any); bs["completed"] != nil || live.JSON["last_24h"].(map[string]any)["completed"] != 1.0 {
		t.Fatalf("stats without history: %s", live.Body)
	}
	e.Must(e.AdminDo("GET", "/api/queue/stats?history=maybe", nil), 422)
	// Newest first.
	id2 := e.Submit(map[string]any{"gpu_count": 64})
	q := e.Must(e.Queue("order=newest&limit=1"), 200)
	if first := q.JSON["entries"].([]any)[0].(map[string]any); first["job_id"] != id2 {
		t.Fatalf("newest first: %s", q.Body)
	}
	e.Must(e.Queue("order=random"), 422)
}

// agentFor returns an agent for worker id, reusing a when it is that worker.
func (e *env) agentFor(id string, a *agent) *agent {
	if a.id == id {
		return a
	}
	e.t.Helper()
	r := e.Must(e.AdminDo("POST", "/api/admin/workers/"+id+"/token", nil), 200)
	return e.newAgent(id, r.JSON["token"].(string), 2)
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// The in-process principal hook: a request the dashboard builds carries its
// session's principal, and the API enforces that principal's scopes.
func TestWithPrincipalInProcess(t *testing.T) {
	t.Parallel()
	e := setup(t, backends["sqlite"](t))
	h := e.srv.Handler()
	call := func(p auth.Principal, method, path string) int {
		req := httptest.NewRequest(method, path, nil)
		req = req.WithContext(orchestrator.WithPrincipal(req.Context(), p))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	viewer := auth.Principal{Kind: auth.KindAdminToken, ID: "tok_v", Name: "v", Scopes: []string{auth.ScopeQueueView}}
	if c := call(viewer, "GET", "/api/queue"); c != http.StatusOK {
		t.Fatalf("viewer in process on the queue: %d", c)
	}
	if c := call(viewer, "GET", "/api/admin/workers"); c != http.StatusForbidden {
		t.Fatalf("viewer in process on admin: %d", c)
	}
	// Without the hook the same in-process request is anonymous.
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/api/queue", nil))
	if rec.Code != http.StatusUnauthorized {
		t.Fatalf("no principal: %d", rec.Code)
	}
}
