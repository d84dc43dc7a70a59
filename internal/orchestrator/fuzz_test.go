package orchestrator_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzWorkerEndpoints sends arbitrary bodies through the real handlers with a
// valid worker token: the answer is never a 5xx.
func FuzzWorkerEndpoints(f *testing.F) {
	for _, s := range []string{`{"name":"x"}`, `{"worker_id":"W","status":"busy","current_job_id":"j_x"}`,
		`{"status":"completed","attempt":0}`, `{"name":"x","running":[{"job_id":"j_1","attempt":-1}]}`, `{}`,
		`{"worker_id":"W","status":"idle","sent_at":"2026-11-23T08:00:00.5+09:00"}`, `{"worker_id":"W","sent_at":"0000-00-00T99"}`} {
		f.Add(0, []byte(s))
		f.Add(1, []byte(s))
		f.Add(2, []byte(s))
		f.Add(3, []byte(s))
	}
	e := fuzzEnv(f)
	f.Fuzz(func(t *testing.T, which int, body []byte) {
		paths := []string{"/api/workers/register", "/api/workers/heartbeat", "/api/workers/job/" + e.jobID + "/status", "/api/workers/disconnect"}
		path := paths[(which%len(paths)+len(paths))%len(paths)]
		b := strings.ReplaceAll(string(body), "W", e.workerID)
		req := httptest.NewRequest("POST", path, strings.NewReader(b))
		req.Header.Set("X-Worker-Token", e.token)
		rec := httptest.NewRecorder()
		e.handler.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s %q → %d %s", path, b, rec.Code, rec.Body)
		}
	})
}

type fuzzState struct {
	handler                http.Handler
	token, workerID, jobID string
}

// fuzzEnv builds one orchestrator on SQLite for the whole fuzz run.
func fuzzEnv(f *testing.F) *fuzzState {
	e := setup(f, backends["sqlite"](f))
	id, token := e.CreateWorker("fuzz", "persistent", nil)
	a := e.newAgent(id, token, 2)
	e.Must(a.register(nil), 200)
	jobID := e.Submit(map[string]any{})
	return &fuzzState{handler: e.srv.Handler(), token: token, workerID: id, jobID: jobID}
}
