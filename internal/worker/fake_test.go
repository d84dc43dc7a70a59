package worker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// fakeOrch is just enough of simpletuner-orchestratord's worker API (see docs/protocol.md)
// to drive a Worker: it records what the worker sends and lets a test inject
// events and failures.
type fakeOrch struct {
	t        *testing.T
	srv      *httptest.Server
	token    string
	workerID string

	down        atomic.Bool            // every request: the connection is dropped
	reject      atomic.Bool            // every request: 401
	rotated     atomic.Pointer[string] // set: the only token taken (see rotate)
	refusals    int                    // 401s answered
	hbFail      atomic.Bool            // heartbeats: 503
	hbDelay     atomic.Int64           // heartbeats: answered (and recorded) this many ns late
	hbHeld      chan struct{}          // a delayed heartbeat has arrived
	silent      atomic.Bool            // the stream sends no pings
	lastWrite   atomic.Int64           // unix ns, taken just before the latest write to a stream
	dropLogs    atomic.Int32           // drop this many log POSTs
	statusCode  atomic.Int32           // answer status reports with this code (0: 200)
	statusDown  atomic.Bool            // status reports only: the connection is dropped
	queueHasJob atomic.Bool
	// onStatus, when set before the worker starts, sees every status
	// report as it arrives.
	onStatus func(jobID string, rep protocol.StatusReport)

	mu          sync.Mutex
	change      chan struct{} // closed and replaced on every recorded request
	registers   []protocol.RegisterRequest
	regSeqs     []int // seq of each registration
	heartbeats  []protocol.HeartbeatRequest
	reports     []fakeReport
	log         map[string][]byte // "<job>-<attempt>" → bytes at their offsets
	logErrs     []string
	logPosts    int
	logDropped  int
	statusDrops int // status reports dropped by statusDown
	regDrops    int // registrations dropped by down
	streams     int
	streamAt    []time.Time // when each stream request arrived
	disconnects int
	hbAtDisc    int // heartbeats recorded when the last disconnect came
	queueChecks int
	seq         int // order of everything recorded
	regReply    func(protocol.RegisterRequest) protocol.RegisterResponse
	hbReply     protocol.HeartbeatResponse
	events      chan string
	kill        chan struct{} // closed to drop the open streams
}

type fakeReport struct {
	JobID string
	protocol.StatusReport
	Seq int
}

func (r fakeReport) err() string {
	if r.Error == nil {
		return ""
	}
	return *r.Error
}

func newFakeOrch(t *testing.T) *fakeOrch {
	f := newFakeOrchUnstarted(t)
	f.srv.Start()
	t.Cleanup(f.close)
	return f
}

func newFakeOrchUnstarted(t *testing.T) *fakeOrch {
	f := &fakeOrch{
		t:        t,
		token:    "wt_" + strings.Repeat("A", 43) + "abcdef",
		workerID: "w_test00000001",
		change:   make(chan struct{}),
		log:      map[string][]byte{},
		events:   make(chan string, 64),
		hbHeld:   make(chan struct{}, 1),
		kill:     make(chan struct{}),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/workers/register", f.register)
	mux.HandleFunc("GET /api/workers/stream", f.stream)
	mux.HandleFunc("POST /api/workers/heartbeat", f.heartbeat)
	mux.HandleFunc("POST /api/workers/job/{id}/status", f.status)
	mux.HandleFunc("POST /api/workers/job/{id}/logs", f.logs)
	mux.HandleFunc("GET /api/workers/queue", f.queue)
	mux.HandleFunc("POST /api/workers/disconnect", f.disconnect)
	f.srv = httptest.NewUnstartedServer(f.gate(mux))
	return f
}

func (f *fakeOrch) close() {
	f.dropStreams()
	f.srv.CloseClientConnections()
	f.srv.Close()
}

func (f *fakeOrch) url() string { return f.srv.URL }

// gate applies the failure switches common to every endpoint.
func (f *fakeOrch) gate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f.down.Load() {
			if r.URL.Path == "/api/workers/register" {
				f.record(func() { f.regDrops++ })
			}
			hijackClose(w)
			return
		}
		if f.reject.Load() || r.Header.Get("X-Worker-Token") != f.validToken() {
			f.record(func() { f.refusals++ })
			writeJSON(w, http.StatusUnauthorized, protocol.ErrorBody{Detail: "invalid worker token", Error: protocol.CodeInvalidToken})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// validToken is the token the fake takes now.
func (f *fakeOrch) validToken() string {
	if tok := f.rotated.Load(); tok != nil {
		return *tok
	}
	return f.token
}

// rotate makes token the only one taken and closes the open streams, as the
// orchestrator does when an admin rotates a worker's token.
func (f *fakeOrch) rotate(token string) {
	f.rotated.Store(&token)
	f.dropStreams()
}

func hijackClose(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if c, _, err := hj.Hijack(); err == nil {
			c.Close()
			return
		}
	}
	http.Error(w, "down", http.StatusServiceUnavailable)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// record runs fn under the lock and wakes waiters.
func (f *fakeOrch) record(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	fn()
	close(f.change)
	f.change = make(chan struct{})
}

// waitFor waits until cond (called under the lock) holds.
func (f *fakeOrch) waitFor(what string, timeout time.Duration, cond func() bool) {
	f.t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		f.mu.Lock()
		ok := cond()
		ch := f.change
		f.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			f.t.Fatalf("timed out after %s waiting for %s\n%s", timeout, what, f.summary())
		}
	}
}

func (f *fakeOrch) summary() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "fake orchestrator: %d registers, %d streams, %d heartbeats, %d log posts (%d dropped), %d disconnects, %d queue checks\n",
		len(f.registers), f.streams, len(f.heartbeats), f.logPosts, f.logDropped, f.disconnects, f.queueChecks)
	for _, r := range f.reports {
		fmt.Fprintf(&b, "  report #%d %s attempt %v: %s %q\n", r.Seq, r.JobID, *r.Attempt, r.Status, r.err())
	}
	return b.String()
}

// reportsLocked returns the reports for one job (lock held by waitFor's cond, or not).
func (f *fakeOrch) reportsLocked(jobID string) []fakeReport {
	var out []fakeReport
	for _, r := range f.reports {
		if r.JobID == jobID {
			out = append(out, r)
		}
	}
	return out
}

func (f *fakeOrch) hasReportLocked(jobID, status string) bool {
	for _, r := range f.reportsLocked(jobID) {
		if r.Status == status {
			return true
		}
	}
	return false
}

func (f *fakeOrch) report(jobID, status string) fakeReport {
	f.t.Helper()
	var out fakeReport
	f.waitFor(fmt.Sprintf("report %s for %s", status, jobID), 20*time.Second, func() bool {
		for _, r := range f.reportsLocked(jobID) {
			if r.Status == status {
				out = r
				return true
			}
		}
		return false
	})
	return out
}

// started waits until the job's trainer runs: its dispatch was acknowledged
// and its first output (the demo trainer prints a line at once) arrived.
func (f *fakeOrch) started(jobID string) {
	f.t.Helper()
	f.report(jobID, "starting")
	f.waitFor("output of "+jobID, 20*time.Second, func() bool {
		for key, out := range f.log {
			if strings.HasPrefix(key, jobID+"-") && len(out) > 0 {
				return true
			}
		}
		return false
	})
}

// send queues one SSE event for the open stream.
func (f *fakeOrch) send(typ string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		f.t.Fatal(err)
	}
	f.mu.Lock()
	f.seq++
	id := f.seq
	f.mu.Unlock()
	f.events <- fmt.Sprintf("id: %d\nevent: %s\ndata: %s\n\n", id, typ, b)
}

func (f *fakeOrch) submit(ev protocol.JobSubmitEvent) {
	ev.Type = protocol.EventJobSubmit
	if ev.UploadEndpoint == "" {
		ev.UploadEndpoint = "/api/cloud/storage"
	}
	if ev.LogEndpoint == "" {
		ev.LogEndpoint = "/api/workers/job/" + ev.JobID + "/logs"
	}
	if ev.Attempt == 0 {
		ev.Attempt = 1
	}
	ev.Provider = "worker"
	f.send(protocol.EventJobSubmit, ev)
}

// dropStreams closes the open streams (the worker sees EOF).
func (f *fakeOrch) dropStreams() {
	f.mu.Lock()
	defer f.mu.Unlock()
	close(f.kill)
	f.kill = make(chan struct{})
}

func (f *fakeOrch) register(w http.ResponseWriter, r *http.Request) {
	var req protocol.RegisterRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, protocol.ErrorBody{Detail: err.Error(), Error: protocol.CodeInvalidJSON})
		return
	}
	resp := protocol.RegisterResponse{
		WorkerID: f.workerID, SSEURL: "/api/workers/stream?worker_id=" + f.workerID,
		Protocol: 2, HeartbeatIntervalSeconds: 30, HeartbeatTimeoutSeconds: 120,
	}
	var hook func(protocol.RegisterRequest) protocol.RegisterResponse
	f.record(func() {
		f.registers = append(f.registers, req)
		f.regSeqs = append(f.regSeqs, f.seq)
		hook = f.regReply
	})
	if hook != nil {
		resp = hook(req)
	} else {
		resp.Resume = req.Running
	}
	writeJSON(w, http.StatusOK, resp)
}

func (f *fakeOrch) stream(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	if r.URL.Query().Get("worker_id") != f.workerID {
		writeJSON(w, http.StatusBadRequest, protocol.ErrorBody{Detail: "worker_id mismatch", Error: protocol.CodeInvalidRequest})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	fl := w.(http.Flusher)
	fl.Flush()
	var kill chan struct{}
	f.record(func() {
		f.streams++
		f.streamAt = append(f.streamAt, arrived)
		kill = f.kill
	})
	ping := time.NewTicker(20 * time.Millisecond)
	defer ping.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-kill:
			return
		case ev := <-f.events:
			f.lastWrite.Store(time.Now().UnixNano())
			if _, err := io.WriteString(w, ev); err != nil {
				return
			}
			fl.Flush()
		case <-ping.C:
			if f.silent.Load() {
				continue
			}
			f.lastWrite.Store(time.Now().UnixNano())
			if _, err := io.WriteString(w, "event: ping\ndata: {\"type\":\"ping\"}\n\n"); err != nil {
				return
			}
			fl.Flush()
		}
	}
}

func (f *fakeOrch) heartbeat(w http.ResponseWriter, r *http.Request) {
	var req protocol.HeartbeatRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, protocol.ErrorBody{Detail: err.Error(), Error: protocol.CodeInvalidJSON})
		return
	}
	if d := f.hbDelay.Load(); d > 0 {
		select {
		case f.hbHeld <- struct{}{}:
		default:
		}
		time.Sleep(time.Duration(d))
	}
	if f.hbFail.Load() {
		writeJSON(w, http.StatusServiceUnavailable, protocol.ErrorBody{Detail: "unavailable", Error: protocol.CodeUnavailable})
		return
	}
	var reply protocol.HeartbeatResponse
	f.record(func() {
		f.heartbeats = append(f.heartbeats, req)
		reply = f.hbReply
	})
	reply.Success = true
	writeJSON(w, http.StatusOK, reply)
}

func (f *fakeOrch) status(w http.ResponseWriter, r *http.Request) {
	if f.statusDown.Load() {
		f.record(func() { f.statusDrops++ })
		hijackClose(w)
		return
	}
	var rep protocol.StatusReport
	if err := json.NewDecoder(r.Body).Decode(&rep); err != nil || rep.Attempt == nil {
		writeJSON(w, http.StatusUnprocessableEntity, protocol.ErrorBody{Detail: "attempt is required", Error: protocol.CodeInvalidRequest})
		return
	}
	if f.onStatus != nil {
		f.onStatus(r.PathValue("id"), rep)
	}
	if code := int(f.statusCode.Load()); code != 0 {
		writeJSON(w, code, protocol.ErrorBody{Detail: "stale attempt", Error: protocol.CodeStaleAttempt, Action: "kill"})
		return
	}
	f.record(func() {
		f.reports = append(f.reports, fakeReport{JobID: r.PathValue("id"), StatusReport: rep, Seq: f.seq})
	})
	writeJSON(w, http.StatusOK, map[string]bool{"success": true})
}

// logs stores chunks at their offsets and checks they arrive in order: a chunk
// may repeat what was stored (a retry) but never leave a gap.
func (f *fakeOrch) logs(w http.ResponseWriter, r *http.Request) {
	if f.dropLogs.Load() > 0 {
		f.dropLogs.Add(-1)
		f.record(func() { f.logDropped++ })
		hijackClose(w)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	off, err1 := strconv.ParseInt(r.Header.Get("X-Log-Offset"), 10, 64)
	att, err2 := strconv.Atoi(r.Header.Get("X-Attempt"))
	if err1 != nil || err2 != nil {
		writeJSON(w, http.StatusUnprocessableEntity, protocol.ErrorBody{Detail: "X-Log-Offset and X-Attempt are required", Error: protocol.CodeInvalidRequest})
		return
	}
	key := fmt.Sprintf("%s-%d", r.PathValue("id"), att)
	f.record(func() {
		f.logPosts++
		have := f.log[key]
		if off > int64(len(have)) {
			f.logErrs = append(f.logErrs, fmt.Sprintf("gap: chunk at %d, have %d", off, len(have)))
			return
		}
		if len(body) > maxLogChunk {
			f.logErrs = append(f.logErrs, fmt.Sprintf("chunk of %d bytes", len(body)))
		}
		end := off + int64(len(body))
		if !bytes.Equal(have[off:min(end, int64(len(have)))], body[:min(end, int64(len(have)))-off]) {
			f.logErrs = append(f.logErrs, fmt.Sprintf("chunk at %d rewrites stored bytes", off))
			return
		}
		if end > int64(len(have)) {
			f.log[key] = append(have, body[int64(len(have))-off:]...)
		}
	})
	w.WriteHeader(http.StatusNoContent)
}

func (f *fakeOrch) queue(w http.ResponseWriter, r *http.Request) {
	f.record(func() { f.queueChecks++ })
	writeJSON(w, http.StatusOK, protocol.QueueCheckResponse{HasJobs: f.queueHasJob.Load()})
}

func (f *fakeOrch) disconnect(w http.ResponseWriter, r *http.Request) {
	var req protocol.DisconnectRequest
	_ = json.NewDecoder(r.Body).Decode(&req)
	f.record(func() {
		f.disconnects++
		f.hbAtDisc = len(f.heartbeats)
	})
	writeJSON(w, http.StatusOK, map[string]bool{"success": true})
}

// listenUnix makes the fake serve on a unix socket instead of TCP.
func (f *fakeOrch) listenUnix(path string) error {
	l, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	f.srv.Listener.Close()
	f.srv.Listener = l
	return nil
}
