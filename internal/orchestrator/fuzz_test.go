package orchestrator

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/web"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// FuzzDecodeBody: any bytes give a value or a 400/422 apiError, never a panic.
func FuzzDecodeBody(f *testing.F) {
	for _, s := range []string{`{"name":"x","gpu_info":{"count":2}}`, `{"status":"idle","worker_id":"w_1"}`,
		`[`, `{"priority": 1e999}`, `{"labels":{"a":1}}`, `null`, `"str"`, `{"running":[{"job_id":1}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		targets := []any{&protocol.RegisterRequest{}, &protocol.HeartbeatRequest{}, &protocol.StatusReport{},
			&api.Submit{}, &api.CreateWorker{}, &api.PatchWorker{}, &api.CreateToken{}}
		for _, v := range targets {
			err := web.DecodeBody(body, v)
			if err == nil {
				continue
			}
			ae, ok := err.(*api.Error)
			if !ok || (ae.Status != 400 && ae.Status != 422) || ae.Body.Detail == "" {
				t.Fatalf("decode %T of %q: %v", v, body, err)
			}
		}
	})
}

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
	id, token := e.createWorker("fuzz", "persistent", nil)
	a := e.newAgent(id, token, 2)
	e.must(a.register(nil), 200)
	jobID := e.submit(map[string]any{})
	return &fuzzState{handler: e.srv.Handler(), token: token, workerID: id, jobID: jobID}
}

// FuzzJobListQuery: any query string is a job filter or a 422 naming the
// parameter, never a panic; a cursor this orchestrator made reads back as
// it was made.
func FuzzJobListQuery(f *testing.F) {
	for _, s := range []string{"limit=50", "cursor=" + encodeCursor(newestFirst, 42), "cursor=MS5vLjc", "order=oldest&offset=3",
		"status=active&worker_id=w_x", "cursor=%ff%fe", "cursor=MS5uLi0x", "limit=0", "order=sideways"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		r := httptest.NewRequest(http.MethodGet, "/api/queue", nil)
		r.URL.RawQuery = raw
		q, err := jobsQuery(nil, r, nil)
		var lq jobListQuery
		if err == nil {
			lq, err = parseJobList(q)
		}
		if err != nil {
			ae, ok := err.(*api.Error)
			if !ok || ae.Status != 422 || ae.Body.Detail == "" {
				t.Fatalf("query %q: %v", raw, err)
			}
			return
		}
		if lq.filter.Limit < 1 || lq.filter.Limit > 200 || lq.filter.AfterSeq < 0 || (lq.order != newestFirst && lq.order != oldestFirst) {
			t.Fatalf("query %q gave %+v", raw, lq)
		}
		if lq.filter.AfterSeq > 0 {
			order, seq, ok := decodeCursor(encodeCursor(lq.order, lq.filter.AfterSeq))
			if !ok || order != lq.order || seq != lq.filter.AfterSeq {
				t.Fatalf("cursor round trip of %+v: %s %d %v", lq, order, seq, ok)
			}
		}
	})
}
