package faults

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	. "github.com/simpletuner/simpletuner-orchestration/test/e2e/e2etest"
)

// Malformed, huge and deeply nested bodies get a quick 4xx, never a 5xx, and
// the server stays healthy and keeps working.
func TestHostileBodies(t *testing.T) {
	o := StartOrchestratorWith(t, OrchOptions{Metrics: true})
	_, wtoken := o.CreateWorker("hostile", true, nil)
	base := takeBaseline(o)
	nested := func(open, close string, n int) []byte {
		return []byte(strings.Repeat(open, n) + strings.Repeat(close, n))
	}
	cases := []struct {
		name, path string
		body       []byte
		worker     bool
		want       int // 0: any 4xx
	}{
		{"malformed submit", "/api/queue/submit", []byte(`{"config": {`), false, 400},
		{"not json", "/api/queue/submit", []byte("\x00\xff garbage"), false, 400},
		{"huge submit 8 MiB", "/api/queue/submit", append([]byte(`{"config": {"x": "`), bytes.Repeat([]byte("a"), 8<<20)...), false, 413},
		{"huge register 8 MiB", "/api/workers/register", append([]byte(`{"name": "`), bytes.Repeat([]byte("a"), 8<<20)...), true, 413},
		{"100k [ submit", "/api/queue/submit", nested("[", "]", 100000), false, 0},
		{"100k { submit config", "/api/queue/submit", []byte(`{"config": ` + strings.Repeat(`{"a":`, 100000) + "1" + strings.Repeat("}", 100000) + "}"), false, 0},
		{"100k [ heartbeat", "/api/workers/heartbeat", nested("[", "]", 100000), true, 0},
		{"100k [ unterminated register", "/api/workers/register", []byte(strings.Repeat("[", 100000)), true, 0},
		{"100k [ status", "/api/workers/job/j_aaaaaaaaaaaa/status", nested("[", "]", 100000), true, 0},
	}
	c := http.Client{Timeout: 10 * time.Second}
	for _, tc := range cases {
		req, _ := http.NewRequest("POST", o.URL+tc.path, bytes.NewReader(tc.body))
		req.Header.Set("Content-Type", "application/json")
		if tc.worker {
			req.Header.Set("X-Worker-Token", wtoken)
		} else {
			req.Header.Set("Authorization", "Bearer "+o.Admin)
		}
		start := time.Now()
		res, err := c.Do(req)
		took := time.Since(start)
		if err != nil {
			// A server may close the connection on a 413 before reading it all.
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		ok := res.StatusCode >= 400 && res.StatusCode < 500
		if tc.want != 0 {
			ok = res.StatusCode == tc.want
		}
		if !ok || took > 2*time.Second {
			t.Errorf("%s: %d in %s, want %v quickly", tc.name, res.StatusCode, took, map[bool]any{true: "a 4xx", false: tc.want}[tc.want == 0])
		}
		if o.Ready() != 200 {
			t.Fatalf("%s: orchestrator not ready afterwards", tc.name)
		}
		t.Logf("RESULT %s: %s → %d in %s", t.Name(), tc.name, res.StatusCode, took.Round(time.Millisecond))
	}
	h := NewHistory(t, o)
	o.StartWorker(WorkerSpec{Name: "after", Persistent: true})
	_, id := h.Submit(trainFor(0.2), nil)
	o.WaitJob(id, "completed", 20*time.Second)
	h.Finish()
	h.Check(Expect{MaxRequeues: 0})
	_ = base
}

// A slowloris (headers sent a byte at a time) must not keep others from being
// served, and the server must cut it off after its ReadHeaderTimeout (10 s,
// full suite). An SSE reader that never reads must not stall dispatch to other
// workers: once its 64-event buffer fills it is dropped.
func TestSlowClients(t *testing.T) {
	fullOnly(t) // keeps make test's fast subset under a minute; CI runs make faults too
	// A long ack timeout and a big body limit: the non-reader is handed one
	// 8 MB job_submit it never reads, which no socket buffer absorbs.
	o := StartOrchestratorWith(t, OrchOptions{Metrics: true, AckTimeout: "60s", MaxBodyBytes: 16 << 20})
	h := NewHistory(t, o)
	o.StartWorker(WorkerSpec{Name: "real", Persistent: true, Labels: map[string]string{"pool": "real"}})
	base := takeBaseline(o)

	// Slowloris: 64 connections dribbling a request header.
	const loris = 64
	var closed atomic.Int32
	var conns []net.Conn
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	started := time.Now()
	closedAt := make([]time.Duration, loris)
	for i := range loris {
		c, err := net.Dial("tcp", strings.TrimPrefix(o.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			hdr := []byte("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("z", 4000))
			for _, b := range hdr {
				if ctx.Err() != nil {
					return
				}
				if _, err := c.Write([]byte{b}); err != nil {
					closed.Add(1)
					closedAt[i] = time.Since(started)
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
	}
	defer func() {
		stop()
		for _, c := range conns {
			c.Close()
		}
		wg.Wait()
	}()
	h.Fault("%d slowloris connections", loris)

	// The never-reading SSE client: a simulated worker whose stream socket has
	// a tiny receive buffer and is never read.
	id, token := o.CreateWorker("stuck-reader", true, map[string]string{"pool": "stuck"})
	sim := &SimWorker{ID: id, Token: token, Name: "stuck-reader", BaseURL: o.URL, Client: &http.Client{Timeout: 10 * time.Second}}
	if err := sim.Register(context.Background()); err != nil {
		t.Fatal(err)
	}
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 1024) })
	}}
	sc, err := d.Dial("tcp", strings.TrimPrefix(o.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	fmt.Fprintf(sc, "GET /api/workers/stream?worker_id=%s HTTP/1.1\r\nHost: x\r\nX-Worker-Token: %s\r\n\r\n", id, token)
	Eventually(t, 5*time.Second, "stuck reader connected", func() bool { return o.Worker(id)["connected"] == true })
	hbctx, hbstop := context.WithCancel(context.Background())
	defer hbstop()
	go func() { // keep it alive by heartbeats: only its stream is stuck
		for hbctx.Err() == nil {
			_ = sim.Heartbeat(hbctx)
			time.Sleep(200 * time.Millisecond)
		}
	}()
	_, big := h.Submit(map[string]any{"blob": strings.Repeat("b", 8<<20)}, map[string]any{"worker_labels": map[string]string{"pool": "stuck"}})
	Eventually(t, 10*time.Second, "the 8 MB job dispatched to the non-reader", func() bool { return o.Job(big)["status"] == "dispatched" })

	// Flood it with drain events (each admin drain sends one) while real jobs
	// are dispatched to the real worker; count how many it took to drop it.
	var sent atomic.Int64
	fctx, fstop := context.WithCancel(context.Background())
	var fwg sync.WaitGroup
	for range 4 {
		fwg.Add(1)
		go func() {
			defer fwg.Done()
			for fctx.Err() == nil && sent.Load() < 50000 {
				if st, _ := o.Do("POST", "/api/admin/workers/"+id+"/drain", nil); st == 200 {
					sent.Add(1)
				}
			}
		}()
	}
	var jobs []string
	for range 3 {
		_, j := h.Submit(trainFor(0.3), map[string]any{"worker_labels": map[string]string{"pool": "real"}})
		jobs = append(jobs, j)
	}
	// Others are served quickly meanwhile.
	var worst time.Duration
	for range 20 {
		s := time.Now()
		if st := o.Ready(); st != 200 {
			t.Errorf("readyz %d during the slow clients", st)
		}
		worst = max(worst, time.Since(s))
		time.Sleep(50 * time.Millisecond)
	}
	for _, j := range jobs {
		o.WaitJob(j, "completed", 30*time.Second)
	}
	Eventually(t, 60*time.Second, "the non-reading stream dropped", func() bool {
		return o.Metric("simpletuner_sse_slow_streams_dropped_total") >= 1
	})
	fstop()
	fwg.Wait()
	t.Logf("RESULT %s: slowloris=%d worst readyz latency %s; 3 jobs completed during the flood; non-reader dropped after %d drain events",
		t.Name(), loris, worst.Round(time.Millisecond), sent.Load())
	Eventually(t, 20*time.Second, "every slowloris connection cut off", func() bool { return closed.Load() == loris })
	t.Logf("RESULT %s: all %d slowloris connections closed by the server, first after %s, last after %s", t.Name(), loris, minD(closedAt), maxD(closedAt))
	stop()
	for _, c := range conns {
		c.Close()
	}
	hbstop()
	sc.Close()
	o.Do("POST", "/api/queue/"+big+"/cancel", nil)
	h.WaitAllTerminal(10 * time.Second)
	h.Finish()
	h.Check(Expect{MaxRequeues: 1})
	Eventually(t, 10*time.Second, "stuck worker offline", func() bool { return o.Worker(id)["connected"] == false })
	base.check(t, o)
}

func minD(ds []time.Duration) time.Duration {
	m := ds[0]
	for _, d := range ds {
		m = min(m, d)
	}
	return m.Round(100 * time.Millisecond)
}

func maxD(ds []time.Duration) time.Duration {
	m := ds[0]
	for _, d := range ds {
		m = max(m, d)
	}
	return m.Round(100 * time.Millisecond)
}

// A job that floods its log (50 MB as fast as it can) completes; the stored
// log is capped with the truncation marker; the worker's memory stays bounded.
func TestLogFlood(t *testing.T) {
	fullOnly(t) // 12–16 s under the race detector on the slower VMs: the fast subset's largest
	const orchLimit = 256 << 10
	o := StartOrchestratorWith(t, OrchOptions{Metrics: true, LogLimitBytes: orchLimit})
	h := NewHistory(t, o)
	flood := `yes "flood flood flood flood flood flood flood flood flood flood flood flood flood" | head -c 50000000; echo; echo done`
	w := o.StartWorker(WorkerSpec{Name: "chatty", Persistent: true, LogLimitBytes: 4 << 20, Command: []string{"/bin/sh", "-c", flood}})
	base := takeBaseline(o)
	start := time.Now()
	_, id := h.Submit(map[string]any{}, nil)
	h.WaitAllTerminal(60 * time.Second)
	took := time.Since(start)
	h.Finish()
	h.Check(Expect{MaxRequeues: 0, Statuses: []string{"completed"}})
	logs := o.Logs(id)
	peak := PeakRSSKiB(w.P.Pid())
	t.Logf("RESULT %s: 50 MB flood completed in %s; stored log %d bytes (limit %d); worker peak RSS %d KiB", t.Name(), took.Round(time.Millisecond), len(logs), orchLimit, peak)
	if len(logs) > orchLimit+4096 {
		t.Errorf("stored log %d bytes, over the %d limit", len(logs), orchLimit)
	}
	if !strings.Contains(logs, "[log truncated") {
		t.Errorf("no truncation marker in the stored log (%d bytes, tail %q)", len(logs), logs[max(0, len(logs)-200):])
	}
	if peak > 128<<10 {
		t.Errorf("worker peak RSS %d KiB for a 50 MB log", peak)
	}
	base.check(t, o)
}

// Request bodies that stop coming, from clients with no credential at all,
// on the routes that read a body before (the dashboard's sign-in) or instead
// of (a refused token) checking it: each connection is cut at
// server.body_timeout (2 s here), /healthz answers throughout, and the
// long-lived requests of a worker running a job (its event stream, its log
// uploads) and a log follower go on through many timeouts.
func TestSlowBodies(t *testing.T) {
	n := 300
	if isFull() {
		n = 1500
	}
	const timeout = 2 * time.Second
	o := StartOrchestratorWith(t, OrchOptions{Metrics: true, BodyTimeout: timeout.String()})
	h := NewHistory(t, o)
	w := o.StartWorker(WorkerSpec{Name: "steady", Persistent: true})
	base := takeBaseline(o)
	_, job := h.Submit(trainFor(4*timeout.Seconds()), nil)
	Eventually(t, 20*time.Second, "job running", func() bool { return o.Job(job)["status"] == "running" })
	follow, err := http.NewRequest("GET", o.URL+"/api/queue/"+job+"/logs?follow=1", nil)
	if err != nil {
		t.Fatal(err)
	}
	follow.Header.Set("Authorization", "Bearer "+o.Admin)
	fres, err := http.DefaultClient.Do(follow)
	if err != nil {
		t.Fatal(err)
	}
	defer fres.Body.Close()
	followed := make(chan string, 1)
	go func() { b, _ := io.ReadAll(fres.Body); followed <- string(b) }()

	routes := []string{
		"POST /api/queue/submit HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 4096\r\n\r\n{\"config\":",
		"POST /ui/signin HTTP/1.1\r\nHost: x\r\nCookie: st_signin=x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 4096\r\n\r\nform_token=x&token=",
		"POST /api/workers/heartbeat HTTP/1.1\r\nHost: x\r\nX-Worker-Token: wt_made_up\r\nContent-Length: 4096\r\n\r\n{\"worker_id\":",
	}
	started := time.Now()
	closedAt := make([]time.Duration, n)
	var closed atomic.Int32
	var conns []net.Conn
	for i := range n {
		c, err := net.Dial("tcp", strings.TrimPrefix(o.URL, "http://"))
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, c)
		if _, err := io.WriteString(c, routes[i%len(routes)]); err != nil {
			t.Fatal(err)
		}
		go func() {
			_, _ = io.Copy(io.Discard, c) // until the server closes it
			closedAt[i] = time.Since(started)
			closed.Add(1)
		}()
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	h.Fault("%d stalled request bodies", n)
	var worst time.Duration
	for closed.Load() < int32(n) && time.Since(started) < timeout {
		s := time.Now()
		res, err := http.Get(o.URL + "/healthz")
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("/healthz during the stalled bodies: %v %v", res, err)
		}
		res.Body.Close()
		worst = max(worst, time.Since(s))
		time.Sleep(50 * time.Millisecond) // sampling
	}
	Eventually(t, 30*time.Second, "every stalled body cut off", func() bool { return closed.Load() == int32(n) })
	if first := minD(closedAt); first < timeout/2 {
		t.Errorf("a stalled body was cut after %s, before the body timeout", first)
	}
	t.Logf("RESULT %s: %d stalled bodies (submit, sign-in, heartbeat), all cut by the server, first after %s, last after %s; "+
		"worst /healthz %s meanwhile", t.Name(), n, minD(closedAt), maxD(closedAt), worst.Round(time.Millisecond))

	o.WaitJob(job, "completed", 30*time.Second)
	select {
	case log := <-followed:
		if !strings.Contains(log, "event: end") || !strings.Contains(log, "training finished") {
			t.Errorf("the log follower did not see the whole job:\n%s", log)
		}
	case <-time.After(10 * time.Second):
		t.Error("the log follow stream did not end with the job")
	}
	if o.Worker(w.ID)["connected"] != true {
		t.Error("the worker lost its stream")
	}
	h.Finish()
	h.Check(Expect{MaxRequeues: 0})
	base.check(t, o)
}
