package orchestrator_test

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/orchtest"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
)

func TestSubmitBeforeAnyWorkerStartsOnConnect(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t), func(o *orchestrator.Options) { o.SchedulerInterval = time.Hour }) // only wake-ups dispatch
		if err := os.MkdirAll(filepath.Join(e.srv.Options().ConfigsDir, "my-config"), 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(e.srv.Options().ConfigsDir, "my-config", "config.json"), []byte(`{"_metadata":{},"config":{"--lr":1}}`), 0o644)
		r := e.Must(e.AdminDo("POST", "/api/queue/submit", map[string]any{"config_name": "my-config", "target": "worker"}), 201)
		jobID := r.JSON["job_id"].(string)
		if r.JSON["status"] != "queued" || !strings.HasPrefix(jobID, "j_") || len(jobID) != 14 {
			t.Fatalf("submit: %s", r.Body)
		}
		a := e.startAgent("late", nil, nil)
		ev := a.next("job_submit", eventWait)
		if ev["job_id"] != jobID || ev["config"].(map[string]any)["--lr"] != float64(1) || ev["attempt"] != float64(1) {
			t.Fatalf("job_submit: %v", ev)
		}
	})
}

func TestSubmitValidation(t *testing.T) {
	t.Parallel()
	e := setup(t, backends["sqlite"](t))
	os.WriteFile(filepath.Join(e.srv.Options().ConfigsDir, "flat.json"), []byte(`{"a":1}`), 0o644)
	e.Submit(map[string]any{"config_name": "flat"})
	e.Submit(map[string]any{"config_name": "flat.json"})
	for _, c := range []struct {
		body   any
		status int
		field  string
	}{
		{map[string]any{"config_name": "missing"}, 404, "missing"},
		{map[string]any{"config_name": "../etc/passwd"}, 422, "config_name"},
		{map[string]any{"config_name": "a/b"}, 422, "config_name"},
		{map[string]any{}, 422, "config_name"},
		{map[string]any{"config": []int{1}}, 422, "config"},
		{map[string]any{"config": map[string]any{}, "target": "mars"}, 422, "target"},
		{map[string]any{"config": map[string]any{}, "priority": 51}, 422, "priority"},
		{map[string]any{"config": map[string]any{}, "gpu_count": -1}, 422, "gpu_count"},
		{map[string]any{"config": map[string]any{}, "worker_labels": map[string]string{"g": "[a"}}, 422, "worker_labels"},
		{map[string]any{"config": map[string]any{}, "max_retries": "3"}, 422, "max_retries"},
		{`{"config": `, 400, ""},
	} {
		r := e.AdminDo("POST", "/api/queue/submit", c.body)
		if r.Status != c.status || !strings.Contains(r.JSON["detail"].(string), c.field) {
			t.Errorf("%v: got %d %s, want %d naming %q", c.body, r.Status, r.Body, c.status, c.field)
		}
	}
	r := e.Must(e.Queue(""), 200)
	if r.JSON["total_pending"] != float64(2) {
		t.Fatalf("rejected submits changed the queue: %s", r.Body)
	}
	e.Must(e.Queue("status=weird"), 422)
	e.Must(e.AdminDo("GET", "/api/queue/j_doesnotexist", nil), 404)
	e.Must(e.Cancel("j_doesnotexist"), 404)
	st := e.Must(e.AdminDo("GET", "/api/queue/stats", nil), 200)
	if st.JSON["queue_depth"] != float64(2) {
		t.Fatalf("stats: %s", st.Body)
	}
}

func TestPriorityThenFIFO(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t))
		low := e.Submit(map[string]any{"priority": 0})
		first := e.Submit(map[string]any{"priority": 30})
		second := e.Submit(map[string]any{"priority": 30})
		a := e.startAgent("w", nil, nil)
		for _, want := range []string{first, second, low} {
			ev := a.next("job_submit", eventWait)
			if ev["job_id"] != want {
				t.Fatalf("got %v, want %s", ev["job_id"], want)
			}
			e.Must(a.report(want, "starting", nil), 200)
			e.Must(a.report(want, "completed", nil), 200)
		}
	})
}

func TestLabelGlobAndGPUMatching(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t))
		small := e.startAgent("small", map[string]string{"gpu_type": "v100"}, map[string]any{"count": 1, "vram_gb": 16})
		big := e.startAgent("big", map[string]string{"gpu_type": "a100-80g"}, map[string]any{"gpu_count": 8, "gpu_vram_gb": 80})
		glob := e.Submit(map[string]any{"worker_labels": map[string]string{"gpu_type": "a100*"}})
		if ev := big.next("job_submit", eventWait); ev["job_id"] != glob {
			t.Fatalf("glob job went elsewhere: %v", ev)
		}
		small.noEvent("job_submit", 300*time.Millisecond)
		count := e.Submit(map[string]any{"gpu_count": 4})
		vram := e.Submit(map[string]any{"min_vram_gb": 40})
		small.noEvent("job_submit", 500*time.Millisecond)
		e.Must(big.report(glob, "starting", nil), 200)
		e.Must(big.report(glob, "completed", nil), 200)
		if ev := big.next("job_submit", eventWait); ev["job_id"] != count {
			t.Fatalf("gpu_count job: %v", ev)
		}
		if got := e.Job(vram)["status"]; got != "queued" {
			t.Fatalf("vram job must wait for the big worker, is %v", got)
		}
	})
}

func TestAckTimeoutWithdrawsWithoutSpendingRetry(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t), func(o *orchestrator.Options) { o.AckTimeout = 300 * time.Millisecond })
		mute := e.startAgent("mute", nil, nil)
		jobID := e.Submit(map[string]any{})
		mute.next("job_submit", eventWait) // never acknowledged
		select {
		case <-mute.closed: // its stream is closed so it re-registers
		case <-time.After(5 * time.Second):
			t.Fatal("stream of a worker that did not ack stayed open")
		}
		testutil.Eventually(t, eventWait, "withdrawn", func() bool {
			j := e.Job(jobID)
			return j["status"] == "queued" || j["attempt"] == float64(2)
		})
		good := e.startAgent("good", nil, nil)
		ev := good.next("job_submit", eventWait)
		if ev["job_id"] != jobID || ev["attempt"] != float64(2) {
			t.Fatalf("redispatch: %v", ev)
		}
		// The first attempt's late ack is refused.
		if r := mute.report(jobID, "starting", map[string]any{"attempt": 1}); r.Status != 409 || r.JSON["error"] != "stale_attempt" || r.JSON["action"] != "kill" {
			t.Fatalf("late ack: %d %s", r.Status, r.Body)
		}
		j := e.Job(jobID)
		if j["retries_used"] != float64(0) {
			t.Fatalf("withdrawal spent a retry: %v", j)
		}
		atts := j["attempts"].([]any)
		if atts[0].(map[string]any)["outcome"] != "withdrawn" {
			t.Fatalf("attempts: %v", atts)
		}
	})
}

func TestWorkerLostRequeuesAndStaleReportIsFenced(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t))
		lost := e.startAgent("lost", nil, nil)
		jobID := e.Submit(map[string]any{})
		lost.next("job_submit", eventWait)
		e.Must(lost.report(jobID, "starting", map[string]any{"attempt": 1}), 200)
		lost.silence()
		// No heartbeats from "lost": after the timeout it goes offline.
		testutil.Eventually(t, eventWait, "worker offline, job requeued", func() bool {
			return e.Worker(lost.id)["status"] == "offline" && e.Job(jobID)["status"] != "running"
		})
		j := e.Job(jobID)
		if j["status"] != "queued" && j["status"] != "dispatched" {
			t.Fatalf("lost job not requeued: %v", j)
		}
		if j["retries_used"] != float64(1) || !strings.Contains(j["error_message"].(string), lost.id) {
			t.Fatalf("retry accounting/reason: %v", j)
		}
		second := e.startAgent("second", nil, nil)
		ev := second.next("job_submit", eventWait)
		if ev["attempt"] != float64(2) {
			t.Fatalf("attempt: %v", ev)
		}
		e.Must(second.report(jobID, "starting", map[string]any{"attempt": 2}), 200)
		// The partitioned first worker comes back and reports: refused, nothing changes.
		before := e.srv.Metrics().StaleRejections.Load()
		if r := lost.report(jobID, "completed", map[string]any{"attempt": 1}); r.Status != 409 || r.JSON["error"] != "stale_attempt" {
			t.Fatalf("stale report: %d %s", r.Status, r.Body)
		}
		if r := lost.report(jobID, "failed", nil); r.Status != 409 {
			t.Fatalf("stale protocol-1 report: %d", r.Status)
		}
		if e.srv.Metrics().StaleRejections.Load() < before+2 || e.Job(jobID)["status"] != "running" {
			t.Fatal("stale report changed the job")
		}
		hb := e.Must(lost.heartbeat("busy", jobID, map[string]any{"running": []map[string]any{{"job_id": jobID, "attempt": 1}}}), 200)
		if c, _ := hb.JSON["cancel"].([]any); len(c) != 1 || c[0] != jobID {
			t.Fatalf("stale worker must be told to cancel: %s", hb.Body)
		}
		e.Must(second.report(jobID, "completed", map[string]any{"attempt": 2}), 200)
		if got := e.Job(jobID)["status"]; got != "completed" {
			t.Fatalf("final: %v", got)
		}
	})
}

func TestRetriesExhaustedFails(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t))
		jobID := e.Submit(map[string]any{"max_retries": 1})
		for i := 1; i <= 2; i++ {
			a := e.startAgent("w"+strconv.Itoa(i), nil, nil)
			a.next("job_submit", eventWait)
			e.Must(a.report(jobID, "starting", nil), 200)
			a.silence()
			a.cancel()
			testutil.Eventually(t, eventWait, "attempt lost", func() bool {
				j := e.Job(jobID)
				return e.Worker(a.id)["status"] == "offline" && (j["status"] == "queued" || j["status"] == "failed" || j["attempt"] != float64(i))
			})
		}
		testutil.Eventually(t, eventWait, "job failed", func() bool { return e.Job(jobID)["status"] == "failed" })
		j := e.Job(jobID)
		if j["status"] != "failed" || !strings.Contains(j["error_message"].(string), "no retries remain") {
			t.Fatalf("want failed with reason: %v", j)
		}
	})
}

func TestCancelQueuedAndRunning(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t))
		queued := e.Submit(map[string]any{"target": "local"}) // no local worker: stays queued
		if r := e.Must(e.Cancel(queued), 200); r.JSON["status"] != "cancelled" {
			t.Fatalf("cancel queued: %s", r.Body)
		}
		e.Must(e.Cancel(queued), 409)

		a := e.startAgent("w", nil, nil)
		running := e.Submit(map[string]any{})
		a.next("job_submit", eventWait)
		e.Must(a.report(running, "starting", nil), 200)
		if r := e.Must(e.Cancel(running), 200); r.JSON["status"] != "canceling" {
			t.Fatalf("cancel running: %s", r.Body)
		}
		if ev := a.next("job_cancel", eventWait); ev["job_id"] != running {
			t.Fatalf("job_cancel: %v", ev)
		}
		e.Must(a.report(running, "cancelled", nil), 200)
		if got := e.Job(running)["status"]; got != "cancelled" {
			t.Fatalf("final: %v", got)
		}
		// A worker that never confirms: cancelled after grace + report timeout, attempt fenced.
		silent := e.Submit(map[string]any{})
		a.next("job_submit", eventWait)
		e.Must(a.report(silent, "starting", nil), 200)
		e.Must(e.Cancel(silent), 200)
		testutil.Eventually(t, eventWait, "forced cancel", func() bool { return e.Job(silent)["status"] == "cancelled" })
		if r := a.report(silent, "completed", nil); r.Status != 409 {
			t.Fatalf("report after forced cancel: %d", r.Status)
		}
	})
}

func TestDrainEphemeralAndPersistent(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t))
		id, token := e.CreateWorker("eph", "ephemeral", nil)
		eph := e.newAgent(id, token, 2)
		e.Must(eph.register(nil), 200)
		eph.connect()
		eph.keepAlive(eph.held)
		pers := e.startAgent("pers", nil, nil)
		j1 := e.Submit(map[string]any{})
		j2 := e.Submit(map[string]any{})
		for _, a := range []*agent{eph, pers} {
			ev := a.next("job_submit", eventWait)
			e.Must(a.report(ev["job_id"].(string), "starting", nil), 200)
			e.Must(e.AdminDo("POST", "/api/admin/workers/"+a.id+"/drain", nil), 200)
			a.next("drain", eventWait)
		}
		j3 := e.Submit(map[string]any{})
		for _, a := range []*agent{eph, pers} {
			a.noEvent("job_submit", 300*time.Millisecond)
		}
		for _, j := range []string{j1, j2} {
			w, ok := e.Job(j)["worker_id"].(string)
			if !ok {
				t.Fatalf("job %s is no longer on a worker: %v", j, e.Job(j))
			}
			a := eph
			if w == pers.id {
				a = pers
			}
			e.Must(a.report(j, "completed", nil), 200)
		}
		if ev := eph.next("shutdown", eventWait); ev["reason"] == nil {
			t.Fatalf("shutdown must carry a top-level reason: %v", ev)
		}
		pers.noEvent("shutdown", 300*time.Millisecond)
		if got := e.Worker(pers.id)["status"]; got != "draining" {
			t.Fatalf("persistent drained worker is %v", got)
		}
		if got := e.Job(j3)["status"]; got != "queued" {
			t.Fatalf("draining workers took a job: %v", got)
		}
		e.Must(e.AdminDo("POST", "/api/admin/workers/"+pers.id+"/resume", nil), 200)
		if ev := pers.next("job_submit", eventWait); ev["job_id"] != j3 {
			t.Fatalf("after resume: %v", ev)
		}
	})
}

func TestLogsAppendReadFollow(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t), func(o *orchestrator.Options) { o.LogLimitBytes = 64 })
		a := e.startAgent("w", nil, nil)
		jobID := e.Submit(map[string]any{})
		a.next("job_submit", eventWait)
		e.Must(a.report(jobID, "starting", nil), 200)
		post := func(offset int, data string, attempt int) orchtest.Reply {
			h := a.hdr()
			h["X-Attempt"], h["X-Log-Offset"] = strconv.Itoa(attempt), strconv.Itoa(offset)
			return e.Do("POST", "/api/workers/job/"+jobID+"/logs", h, data)
		}
		e.Must(post(0, "step 1\n", 1), 200)
		e.Must(post(0, "step 1\n", 1), 200) // duplicate: stored once
		e.Must(post(7, "step 2\n", 1), 200)
		if r := post(100, "gap\n", 1); r.Status != 409 || r.Header.Get("X-Log-Size") != "14" {
			t.Fatalf("gap: %d %v", r.Status, r.Header)
		}
		if r := post(14, "x\n", 2); r.Status != 409 || r.JSON["error"] != "stale_attempt" {
			t.Fatalf("wrong attempt: %d", r.Status)
		}
		e.Must(e.AdminDo("GET", "/api/queue/"+jobID+"/logs", nil), 200)

		// Follow: streams lines, ends when the job does.
		req, _ := http.NewRequestWithContext(context.Background(), "GET", e.URL+"/api/queue/"+jobID+"/logs?follow=1", nil)
		req.Header.Set("Authorization", "Bearer "+e.Admin)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		e.Must(post(14, strings.Repeat("long line ", 10)+"\n", 1), 200) // crosses the 64-byte cap
		e.Must(a.report(jobID, "completed", nil), 200)
		var lines []string
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
		text := strings.Join(lines, "\n")
		for _, want := range []string{"data: step 1", "data: step 2", "truncated", "event: end", `"completed"`} {
			if !strings.Contains(text, want) {
				t.Errorf("follow output lacks %q:\n%s", want, text)
			}
		}
		if strings.Count(text, "step 1") != 1 {
			t.Errorf("duplicate chunk stored twice:\n%s", text)
		}
	})
}

func TestRestartWithRunningJobResumes(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		st := open(t)
		opt := testOptions(t)
		opt.StartupGrace = 2 * time.Second
		e1 := startEnv(t, st, opt)
		a := e1.startAgent("w", nil, nil)
		jobID := e1.Submit(map[string]any{})
		a.next("job_submit", eventWait)
		e1.Must(a.report(jobID, "starting", map[string]any{"attempt": 1}), 200)
		// The orchestrator goes away (its streams close) and a new one starts on the same store.
		e1.Stop()
		e2 := startEnv(t, st, opt)
		a.e = e2
		r := e2.Must(a.register(map[string]any{"running": []map[string]any{{"job_id": jobID, "attempt": 1}}}), 200)
		if res, _ := r.JSON["resume"].([]any); len(res) != 1 {
			t.Fatalf("no resume after restart: %s", r.Body)
		}
		a.connect()
		a.keepAlive(a.held)
		e2.Must(a.report(jobID, "completed", map[string]any{"attempt": 1}), 200)
		j := e2.Job(jobID)
		if j["status"] != "completed" || j["retries_used"] != float64(0) || j["attempt"] != float64(1) {
			t.Fatalf("after restart: %v", j)
		}
	})
}

// A worker stopped on purpose reports its attempt cancelled with shutdown
// set: the job goes back to the queue without spending a retry, even with
// none left. The same report without shutdown (the worker gave the job up
// for a reason of its own) is a loss: with no retries left the job fails.
func TestWorkerStoppedOnPurposeSpendsNoRetry(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t))
		a := e.startAgent("a", nil, nil)
		stopped := e.Submit(map[string]any{"max_retries": 0})
		a.next("job_submit", eventWait)
		e.Must(a.report(stopped, "running", nil), 200)
		e.Must(a.report(stopped, "cancelled", map[string]any{"error": "worker shutting down: the worker was stopped", "shutdown": true}), 200)
		// Requeued, the job goes straight back to the idle worker.
		a.next("job_submit", eventWait)
		j := e.Job(stopped)
		if j["attempt"] != float64(2) || j["retries_used"] != float64(0) {
			t.Fatalf("after a stop on purpose: %v", j)
		}
		first := j["attempts"].([]any)[0].(map[string]any)
		if msg, _ := first["error"].(string); first["outcome"] != "worker_lost" ||
			!strings.Contains(msg, "its worker was stopped on purpose (worker shutting down: the worker was stopped); requeued without spending a retry") {
			t.Fatalf("attempt 1: %v", first)
		}
		// The same report without shutdown spends a retry it does not have.
		e.Must(a.report(stopped, "running", nil), 200)
		e.Must(a.report(stopped, "cancelled", map[string]any{"error": "abandoned"}), 200)
		if j := e.Job(stopped); j["status"] != "failed" || !strings.Contains(j["error_message"].(string), "no retries remain") {
			t.Fatalf("without shutdown: %v", j)
		}
	})
}
