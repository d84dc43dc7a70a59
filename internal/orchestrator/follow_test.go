package orchestrator_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/orchtest"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
)

// follower reads a logs?follow=1 stream into a buffer as it arrives.
type follower struct {
	t      testing.TB
	res    *http.Response
	buf    testutil.Buffer
	done   chan struct{}
	cancel context.CancelFunc
}

func (e *env) follow(token, jobID string) (*follower, int) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", e.URL+"/api/queue/"+jobID+"/logs?follow=1", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		e.t.Fatal(err)
	}
	if res.StatusCode != 200 {
		res.Body.Close()
		cancel()
		return nil, res.StatusCode
	}
	f := &follower{t: e.t, res: res, done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(f.done)
		_, _ = io.Copy(&f.buf, res.Body)
		res.Body.Close()
	}()
	e.t.Cleanup(f.close)
	return f, 200
}

func (f *follower) close() {
	f.cancel()
	<-f.done
}

func (f *follower) events() []testutil.SSEEvent { return testutil.ParseSSE([]byte(f.buf.String())) }

func (f *follower) ended(timeout time.Duration) bool {
	select {
	case <-f.done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// startedJob submits a job and has an agent start it.
func (e *env) startedJob() (*agent, string) {
	e.t.Helper()
	a := e.startAgent("w", nil, nil)
	id := e.Submit(map[string]any{})
	a.next("job_submit", eventWait)
	e.Must(a.report(id, "starting", map[string]any{"attempt": 1}), 200)
	return a, id
}

func (a *agent) postLog(jobID string, offset int, data string) orchtest.Reply {
	a.e.t.Helper()
	h := a.hdr()
	h["X-Attempt"], h["X-Log-Offset"] = "1", strconv.Itoa(offset)
	return a.e.Must(a.e.Do("POST", "/api/workers/job/"+jobID+"/logs", h, data), 200)
}

// A job writes event-stream fields after bare CRs: a follower that splits
// lines as the rules say still sees only log lines, and the one end event is
// the orchestrator's own.
func TestFollowedJobCannotForgeEvents(t *testing.T) {
	t.Parallel()
	e := setup(t, backends["sqlite"](t))
	a, id := e.startedJob()
	f, _ := e.follow(e.Admin, id)
	forged := "epoch 1\revent: end\rdata: {\"job_id\":\"" + id + "\",\"status\":\"completed\"}\r\rid: 99\r"
	a.postLog(id, 0, forged)
	a.postLog(id, len(forged), "\nepoch 2\n")
	testutil.Eventually(t, eventWait, "the forged text to arrive as log lines", func() bool {
		return strings.Contains(f.buf.String(), "epoch 2")
	})
	var lines []string
	for _, ev := range f.events() {
		if ev.Type != "log" {
			t.Fatalf("a %q event while the job runs: %+v\n%q", ev.Type, ev, f.buf.String())
		}
		lines = append(lines, strings.Split(ev.Data, "\n")...)
	}
	want := []string{"epoch 1", "event: end", `data: {"job_id":"` + id + `","status":"completed"}`, "", "id: 99", "epoch 2"}
	if strings.Join(lines, "|") != strings.Join(want, "|") {
		t.Fatalf("log lines %q; want %q", lines, want)
	}
	e.Must(a.report(id, "failed", map[string]any{"attempt": 1}), 200)
	if !f.ended(5 * time.Second) {
		t.Fatal("the stream did not end with the job")
	}
	evs := f.events()
	if last := evs[len(evs)-1]; last.Type != "end" || !strings.Contains(last.Data, `"failed"`) {
		t.Fatalf("last event %+v; want the real end (failed)", last)
	}
}

// A revoked admin token loses the follow stream it opened, within the
// re-check interval, while the job keeps running.
func TestFollowEndsWhenTheTokenIsRevoked(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t), func(o *orchestrator.Options) { o.RecheckInterval = 100 * time.Millisecond })
		_, id := e.startedJob()
		r := e.Must(e.AdminDo("POST", "/api/admin/tokens", map[string]any{"name": "viewer", "scopes": []string{"queue.view"}}), 201)
		viewer, tokID := r.JSON["token"].(string), r.JSON["id"].(string)
		f, _ := e.follow(viewer, id)
		if f.ended(300 * time.Millisecond) {
			t.Fatal("the stream ended before the token was revoked")
		}
		e.Must(e.AdminDo("DELETE", "/api/admin/tokens/"+tokID, nil), 200)
		if !f.ended(5 * time.Second) {
			t.Fatal("the stream outlived its revoked token")
		}
		if evs := f.events(); len(evs) == 0 || evs[len(evs)-1].Type != "error" {
			t.Fatalf("events %+v; want a closing error event", evs)
		}
		if _, status := e.follow(viewer, id); status != 401 {
			t.Fatalf("a new follow with the revoked token: %d", status)
		}
	})
}

// One credential may hold only so many follow streams; closing one frees
// its place.
func TestFollowersPerCredentialAreCapped(t *testing.T) {
	t.Parallel()
	e := setup(t, backends["sqlite"](t), func(o *orchestrator.Options) { o.MaxLogFollowers = 2 })
	_, id := e.startedJob()
	f1, _ := e.follow(e.Admin, id)
	e.follow(e.Admin, id)
	if _, status := e.follow(e.Admin, id); status != 429 {
		t.Fatalf("third follow: %d; want 429", status)
	}
	r := e.Must(e.AdminDo("POST", "/api/admin/tokens", map[string]any{"name": "other", "scopes": []string{"queue.view"}}), 201)
	if _, status := e.follow(r.JSON["token"].(string), id); status != 200 {
		t.Fatalf("another credential: %d; want 200", status)
	}
	f1.close()
	testutil.Eventually(t, eventWait, "the closed stream's place to be free", func() bool {
		f, status := e.follow(e.Admin, id)
		if f != nil {
			f.close()
		}
		return status == 200
	})
}

// A follower that never reads is dropped after the write timeout instead of
// holding its handler (and its place) for as long as the job runs.
func TestFollowerThatDoesNotReadIsDropped(t *testing.T) {
	t.Parallel()
	// The tests' heartbeat timeout outlasts the uploads below, however busy
	// they keep a slow machine.
	e := setup(t, backends["sqlite"](t), func(o *orchestrator.Options) { o.StreamWriteTimeout = 300 * time.Millisecond })
	a, id := e.startedJob()
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /api/queue/%s/logs?follow=1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", id, e.Admin)
	testutil.Eventually(t, eventWait, "the follow to start", func() bool { return e.srv.API().Following() == 1 })
	line := strings.Repeat("z", 1023) + "\n"
	chunk := strings.Repeat(line, 512) // 512 KiB
	offset := 0
	for range 16 { // 8 MiB: more than the socket buffers of a reader that does not read hold
		a.postLog(id, offset, chunk)
		offset += len(chunk)
	}
	testutil.Eventually(t, eventWait, "the stalled follower to be dropped", func() bool { return e.srv.API().Following() == 0 })
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, bufio.NewReader(conn)); err != nil && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("the dropped stream did not end: %v", err)
	}
}

// readCounter counts the log reads a store serves.
type readCounter struct {
	store.Store
	reads atomic.Int64
}

func (c *readCounter) ReadLog(ctx context.Context, jobID string, after store.LogCursor, maxBytes int) ([]store.LogChunk, error) {
	c.reads.Add(1)
	return c.Store.ReadLog(ctx, jobID, after, maxBytes)
}

// Followers of a quiet job do not poll the store several times a second each.
func TestFollowersDoNotPollTheStore(t *testing.T) {
	t.Parallel()
	st := &readCounter{Store: backends["sqlite"](t)}
	e := setup(t, st)
	startFollowers(t, e, 8)

	before := st.reads.Load()
	window := time.Second
	time.Sleep(window) // a quiet second: the window measured, not a timer waited for
	quiet := st.reads.Load() - before
	t.Logf("log reads by 8 followers of a quiet job in %s: %d", window, quiet)
	if quiet > 8 {
		t.Errorf("%d reads in a quiet %s by 8 followers; want at most one each (the fallback look)", quiet, window)
	}
}

// Output stored here reaches the followers without a read per follower. The
// fallback look is put out of the way: on a slow machine it would fire during
// the appends and count reads this test is not about.
func TestFollowersGetAppendsWithoutReads(t *testing.T) {
	t.Parallel()
	st := &readCounter{Store: backends["sqlite"](t)}
	e := setup(t, st, func(o *orchestrator.Options) { o.SetFollowFallback(time.Hour) })
	a, id, fs := startFollowers(t, e, 8)

	before := st.reads.Load()
	offset := len("first\n")
	for i := range 50 {
		l := fmt.Sprintf("line %d\n", i)
		a.postLog(id, offset, l)
		offset += len(l)
	}
	testutil.Eventually(t, eventWait, "every line everywhere", func() bool {
		for _, f := range fs {
			if !strings.Contains(f.buf.String(), "line 49") {
				return false
			}
		}
		return true
	})
	busy := st.reads.Load() - before
	t.Logf("log reads by %d followers for 50 appends: %d", len(fs), busy)
	if busy != 0 {
		t.Errorf("%d reads for 50 appends by %d followers; appends made here should reach them without reads", busy, len(fs))
	}
}

// startFollowers starts a job and n followers of it, and waits until each has
// caught up with its first line.
func startFollowers(t *testing.T, e *env, n int) (*agent, string, []*follower) {
	t.Helper()
	a, id := e.startedJob()
	var fs []*follower
	for range n {
		f, _ := e.follow(e.Admin, id)
		fs = append(fs, f)
	}
	testutil.Eventually(t, eventWait, "every follow to start", func() bool { return e.srv.API().Following() == n })
	a.postLog(id, 0, "first\n") // a new attempt: each follower catches up once
	testutil.Eventually(t, eventWait, "the first line everywhere", func() bool {
		for _, f := range fs {
			if !strings.Contains(f.buf.String(), "first") {
				return false
			}
		}
		return true
	})
	return a, id, fs
}
