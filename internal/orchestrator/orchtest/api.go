package orchtest

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"

	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
)

// The API calls that tests make over and over, typed: each builds the
// request, sends it, and fails the test on a transport error or, where it
// says so, on a status other than the one the call answers with.

// Reply is an API reply: its status, headers, body, and the body decoded as
// a JSON object (nil when it is not one).
type Reply struct {
	Status int
	Header http.Header
	Body   []byte
	JSON   map[string]any
}

// Do sends a request with headers. body is nil (no body), a string or
// []byte (sent as is), or any other value (sent as its JSON).
func (o *Orch) Do(method, path string, headers map[string]string, body any) Reply {
	o.T.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, _ := json.Marshal(b)
		rd = bytes.NewReader(data)
	}
	req, _ := http.NewRequest(method, o.URL+path, rd)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	return o.Send(req)
}

// Send sends a request the test built itself (a streamed body, a path
// written exactly as given) and reads the reply.
func (o *Orch) Send(req *http.Request) Reply {
	o.T.Helper()
	res, err := testutil.Client.Do(req)
	if err != nil {
		o.T.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(res.Body)
	r := Reply{Status: res.StatusCode, Header: res.Header, Body: data}
	_ = json.Unmarshal(data, &r.JSON)
	return r
}

// AdminDo is Do as the admin.
func (o *Orch) AdminDo(method, path string, body any) Reply {
	o.T.Helper()
	return o.Do(method, path, map[string]string{"Authorization": "Bearer " + o.Admin}, body)
}

// Must fails the test unless r has status, and returns r.
func (o *Orch) Must(r Reply, status int) Reply {
	o.T.Helper()
	if r.Status != status {
		o.T.Fatalf("got HTTP %d, want %d: %s", r.Status, status, r.Body)
	}
	return r
}

// CreateWorker makes a worker of type typ through the admin API and returns
// its id and token. Its labels are unlocked, so its agent's reports set
// them: tests place jobs by what their workers report.
func (o *Orch) CreateWorker(name, typ string, labels map[string]string) (id, token string) {
	o.T.Helper()
	r := o.Must(o.AdminDo("POST", "/api/admin/workers", map[string]any{"name": name, "worker_type": typ, "labels": labels,
		"labels_locked": false}), 201)
	return r.JSON["worker_id"].(string), r.JSON["token"].(string)
}

// Submit queues a job as the admin and returns its id. A body with neither
// config nor config_name gets a small LoRA config.
func (o *Orch) Submit(body map[string]any) string {
	o.T.Helper()
	if _, ok := body["config"]; !ok {
		if _, ok := body["config_name"]; !ok {
			body["config"] = map[string]any{"model_type": "lora"}
		}
	}
	r := o.Must(o.AdminDo("POST", "/api/queue/submit", body), 201)
	return r.JSON["job_id"].(string)
}

// Job is the job as GET /api/queue/{id} shows it.
func (o *Orch) Job(id string) map[string]any {
	o.T.Helper()
	return o.Must(o.AdminDo("GET", "/api/queue/"+id, nil), 200).JSON
}

// Cancel asks for the job's cancellation; the test checks the reply.
func (o *Orch) Cancel(id string) Reply {
	o.T.Helper()
	return o.AdminDo("POST", "/api/queue/"+id+"/cancel", nil)
}

// Queue lists jobs; query is the URL query without its "?" ("" for none).
func (o *Orch) Queue(query string) Reply {
	o.T.Helper()
	if query != "" {
		query = "?" + query
	}
	return o.AdminDo("GET", "/api/queue"+query, nil)
}

// Worker is the worker as GET /api/admin/workers/{id} shows it.
func (o *Orch) Worker(id string) map[string]any {
	o.T.Helper()
	return o.Must(o.AdminDo("GET", "/api/admin/workers/"+id, nil), 200).JSON
}
