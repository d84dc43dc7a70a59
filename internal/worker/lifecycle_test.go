package worker

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

func TestAuthRejectedAtRegister(t *testing.T) {
	t.Parallel()
	f := newFakeOrch(t)
	f.reject.Store(true)
	r := startWorker(t, f, nil)
	err := r.wait(t, 5*time.Second)
	if !errors.Is(err, ErrAuthRejected) {
		t.Fatalf("Serve = %v; want ErrAuthRejected", err)
	}
	if !strings.Contains(err.Error(), "rotated or revoked") {
		t.Errorf("message %q", err)
	}
	if log := r.logs.String(); !strings.Contains(log, "token="+f.token[:8]) {
		t.Errorf("the log should name the token by its first 8 characters:\n%s", log)
	}
}

// A 401 on the heartbeat (token rotated while connected) stops the worker and its
// job; the job's outcome is kept for after the next registration.
func TestAuthRejectedWhileRunning(t *testing.T) {
	t.Parallel()
	var opt Options
	f := newFakeOrch(t)
	r := startWorker(t, f, func(o *Options) { opt = *o })
	f.connected(1)
	f.submit(protocol.JobSubmitEvent{JobID: "j_auth00000001", Config: json.RawMessage(`{"steps":100000,"step_seconds":0.05}`)})
	f.started("j_auth00000001")
	pids := pidsOf(t, filepath.Join(opt.StateDir, "jobs", "j_auth00000001"))
	f.reject.Store(true)
	if err := r.wait(t, 10*time.Second); !errors.Is(err, ErrAuthRejected) {
		t.Fatalf("Serve = %v; want ErrAuthRejected", err)
	}
	waitDead(t, pids, 5*time.Second)
	if rec, ok := spooledReport(t, opt.StateDir, "j_auth00000001-1"); !ok || rec.Status != "cancelled" || !rec.AfterRegister || rec.Shutdown {
		t.Errorf("spooled record %+v (spooled: %v)", rec, ok)
	}
}

// A stream that sends nothing (no ping) for 3 ping intervals is closed and the
// worker reconnects.
func TestSilentStreamReconnects(t *testing.T) {
	t.Parallel()
	f, _ := setup(t, nil)
	f.connected(1)
	f.silent.Store(true)
	f.waitFor("a second stream after silence", 5*time.Second, func() bool { return f.streams >= 2 && len(f.registers) >= 2 })
}

// The silence limit follows the ping interval the orchestrator announced at
// registration, not workerd's built-in guess (50 ms here): announced 0.5 s,
// the stream is dropped only after 3 × 0.5 s without a byte.
//
// The worker times its silence from the last byte it read, which it cannot
// have read before the fake began writing it; the fake sees the new stream
// only after the worker decided to reconnect. So the span from the fake's last
// write to the next stream request can only be longer than the worker's own
// measure, however late either side is scheduled.
func TestSilenceLimitFollowsAnnouncedPing(t *testing.T) {
	t.Parallel()
	f := newFakeOrch(t)
	f.regReply = func(req protocol.RegisterRequest) protocol.RegisterResponse {
		return protocol.RegisterResponse{WorkerID: f.workerID, SSEURL: "/api/workers/stream?worker_id=" + f.workerID,
			Protocol: 2, HeartbeatIntervalSeconds: 30, HeartbeatTimeoutSeconds: 120, PingIntervalSeconds: 0.5, Resume: req.Running}
	}
	startWorker(t, f, nil) // built-in ping interval 50 ms
	f.connected(1)
	f.silent.Store(true)
	f.waitFor("a new stream after 3 announced intervals of silence", 5*time.Second, func() bool { return f.streams >= 2 })
	f.mu.Lock()
	opened, reconnected := f.streamAt[0], f.streamAt[1]
	f.mu.Unlock()
	// The second stream is silent too: the last write was to the first one,
	// if there was any before the silence.
	quietFor := reconnected.Sub(later(opened, time.Unix(0, f.lastWrite.Load())))
	t.Logf("dropped after %s of silence", quietFor.Round(time.Millisecond))
	if quietFor < 1500*time.Millisecond {
		t.Fatalf("the worker dropped a stream quiet for %s though the orchestrator announced 0.5 s pings (limit 1.5 s)", quietFor.Round(time.Millisecond))
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// A dropped stream is re-established; the job keeps running and is resumed.
func TestReconnectResumesJob(t *testing.T) {
	t.Parallel()
	f, r := setup(t, nil)
	f.connected(1)
	f.submit(protocol.JobSubmitEvent{JobID: "j_resume000001", Attempt: 4, Config: json.RawMessage(`{"steps":30,"step_seconds":0.02}`)})
	f.started("j_resume000001")
	f.dropStreams()
	f.connected(2)
	f.mu.Lock()
	reg := f.registers[len(f.registers)-1]
	f.mu.Unlock()
	if len(reg.Running) != 1 || reg.Running[0] != (protocol.RunningAttempt{JobID: "j_resume000001", Attempt: 4, State: protocol.AttemptRunning}) ||
		reg.CurrentJobID == nil || *reg.CurrentJobID != "j_resume000001" {
		t.Errorf("re-registration %+v", reg)
	}
	f.report("j_resume000001", "completed")
	if !strings.Contains(r.logs.String(), "resumed the running attempt") {
		t.Errorf("resume not logged")
	}
}

// An attempt the orchestrator abandons at registration is killed and not
// reported.
func TestAbandonAtRegister(t *testing.T) {
	t.Parallel()
	var opt Options
	f, _ := setup(t, func(o *Options) { opt = *o })
	f.connected(1)
	f.submit(protocol.JobSubmitEvent{JobID: "j_abandon00001", Config: json.RawMessage(`{"steps":100000,"step_seconds":0.05,"ignore_sigterm":true}`)})
	f.started("j_abandon00001")
	pids := pidsOf(t, filepath.Join(opt.StateDir, "jobs", "j_abandon00001"))
	f.mu.Lock()
	f.regReply = func(req protocol.RegisterRequest) protocol.RegisterResponse {
		return protocol.RegisterResponse{WorkerID: f.workerID, Protocol: 2, Abandon: req.Running}
	}
	f.mu.Unlock()
	f.dropStreams()
	f.connected(2)
	waitDead(t, pids, 5*time.Second)
	f.waitFor("idle heartbeat", 5*time.Second, func() bool {
		return len(f.heartbeats) > 0 && f.heartbeats[len(f.heartbeats)-1].Status == "idle"
	})
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, rep := range f.reportsLocked("j_abandon00001") {
		if protocol.JobStatus(rep.Status).Terminal() {
			t.Errorf("abandoned attempt reported %s", rep.Status)
		}
	}
}

// A 409 on a running attempt's report means another attempt owns the job: kill.
func TestStaleAttemptKilled(t *testing.T) {
	t.Parallel()
	var opt Options
	f, r := setup(t, func(o *Options) { opt = *o })
	f.connected(1)
	f.statusCode.Store(409)
	f.submit(protocol.JobSubmitEvent{JobID: "j_stale0000001", Config: json.RawMessage(`{"steps":100000,"step_seconds":0.05}`)})
	// Heartbeats keep coming, so the wait re-checks the log often.
	f.waitFor("the stale attempt stopped", 5*time.Second, func() bool {
		return strings.Contains(r.logs.String(), "training stopped; not reported")
	})
	m := regexp.MustCompile(`training started.*pid=(\d+)`).FindStringSubmatch(r.logs.String())
	if m == nil {
		t.Fatal("no pid logged")
	}
	pid, _ := strconv.Atoi(m[1])
	waitDead(t, []int{pid}, 5*time.Second)
	if left := spooledReports(t, opt.StateDir); len(left) > 0 {
		t.Errorf("a stale attempt's outcome was spooled: %+v", left)
	}
}

// Without acknowledged heartbeats for SelfFenceAfter the job is stopped; its
// cancelled report waits for the next registration.
func TestSelfFence(t *testing.T) {
	t.Parallel()
	var opt Options
	f, _ := setup(t, func(o *Options) {
		o.SelfFenceAfter = 300 * time.Millisecond
		opt = *o
	})
	f.connected(1)
	f.submit(protocol.JobSubmitEvent{JobID: "j_fence0000001", Config: json.RawMessage(`{"steps":100000,"step_seconds":0.05,"ignore_sigterm":true}`)})
	f.started("j_fence0000001")
	pids := pidsOf(t, filepath.Join(opt.StateDir, "jobs", "j_fence0000001"))

	f.down.Store(true) // heartbeats, stream, everything
	f.dropStreams()
	f.srv.CloseClientConnections()
	waitDead(t, pids, 5*time.Second)
	rec := waitSpooled(t, opt.StateDir, "j_fence0000001-1", true, 5*time.Second)
	if rec.Status != "cancelled" || !strings.Contains(rec.Error, "self-fenced") || !rec.AfterRegister || rec.Shutdown {
		t.Fatalf("spooled %+v", rec)
	}
	f.mu.Lock()
	regsBefore := len(f.registers)
	f.mu.Unlock()
	f.down.Store(false)
	rep := f.report("j_fence0000001", "cancelled")
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.regSeqs) <= regsBefore || rep.Seq < f.regSeqs[regsBefore] {
		t.Errorf("the self-fenced report (#%d) was sent before re-registering (%v)", rep.Seq, f.regSeqs)
	}
}

func TestEphemeralExitsWhenQueueEmpty(t *testing.T) {
	t.Parallel()
	f := newFakeOrch(t)
	r := startWorker(t, f, func(o *Options) { o.Persistent = false })
	f.connected(1)
	f.submit(protocol.JobSubmitEvent{JobID: "j_ephem0000001", Config: json.RawMessage(`{"steps":2,"step_seconds":0.01}`)})
	if err := r.wait(t, 10*time.Second); err != nil {
		t.Fatalf("Serve = %v", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.hasReportLocked("j_ephem0000001", "completed") || f.queueChecks != 1 || f.disconnects != 1 {
		t.Errorf("completed=%v queue checks=%d disconnects=%d", f.hasReportLocked("j_ephem0000001", "completed"), f.queueChecks, f.disconnects)
	}
	if len(f.heartbeats) != f.hbAtDisc {
		t.Errorf("%d heartbeat(s) after the disconnect", len(f.heartbeats)-f.hbAtDisc)
	}
}

// A heartbeat already sent when the worker leaves is answered before the
// goodbye goes out: the orchestrator must not handle it after the
// disconnect and take the worker for alive again.
func TestHeartbeatInFlightLandsBeforeTheDisconnect(t *testing.T) {
	t.Parallel()
	f, r := setup(t, nil)
	f.connected(1)
	f.hbDelay.Store(int64(300 * time.Millisecond))
	select {
	case <-f.hbHeld:
	case <-time.After(5 * time.Second):
		t.Fatal("no heartbeat came")
	}
	f.mu.Lock()
	before := len(f.heartbeats)
	f.mu.Unlock()
	r.w.Drain() // idle: it leaves at once
	if err := r.wait(t, 10*time.Second); err != nil {
		t.Fatalf("Serve = %v", err)
	}
	// The held heartbeat is recorded whenever its handler wakes, before or
	// after the disconnect.
	f.waitFor("the held heartbeat handled", 5*time.Second, func() bool { return len(f.heartbeats) > before })
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.disconnects != 1 {
		t.Fatalf("disconnects %d", f.disconnects)
	}
	if len(f.heartbeats) != f.hbAtDisc {
		t.Errorf("%d heartbeat(s) handled after the disconnect", len(f.heartbeats)-f.hbAtDisc)
	}
}

func TestEphemeralStaysWhenQueueHasJobs(t *testing.T) {
	t.Parallel()
	f := newFakeOrch(t)
	f.queueHasJob.Store(true)
	r := startWorker(t, f, func(o *Options) { o.Persistent = false })
	f.connected(1)
	f.submit(protocol.JobSubmitEvent{JobID: "j_ephem0000002", Config: json.RawMessage(`{"steps":1,"step_seconds":0}`)})
	f.report("j_ephem0000002", "completed")
	f.waitFor("queue check", 5*time.Second, func() bool { return f.queueChecks == 1 })
	f.queueHasJob.Store(false)
	f.submit(protocol.JobSubmitEvent{JobID: "j_ephem0000003", Config: json.RawMessage(`{"steps":1,"step_seconds":0}`)})
	if err := r.wait(t, 10*time.Second); err != nil {
		t.Fatalf("Serve = %v", err)
	}
	if f.report("j_ephem0000003", "completed").JobID == "" {
		t.Fatal("second job not run")
	}
}

// Drain (first SIGTERM): the running job finishes, no new job is taken, the
// worker keeps heartbeating, then exits.
func TestDrainFinishesJobThenExits(t *testing.T) {
	t.Parallel()
	f, r := setup(t, nil)
	f.connected(1)
	// Long enough to be still running when the drain starts, on a loaded machine too.
	f.submit(protocol.JobSubmitEvent{JobID: "j_drain0000001", Config: json.RawMessage(`{"steps":50,"step_seconds":0.02}`)})
	f.started("j_drain0000001")
	r.w.Drain()
	if st := r.w.Status(); !strings.Contains(st, "draining") || !strings.Contains(st, "j_drain0000001") {
		t.Errorf("Status %q", st)
	}
	f.mu.Lock()
	hbs := len(f.heartbeats)
	f.mu.Unlock()
	f.waitFor("heartbeats while draining", 5*time.Second, func() bool { return len(f.heartbeats) > hbs })
	f.submit(protocol.JobSubmitEvent{JobID: "j_drain0000002", Config: json.RawMessage(`{"steps":1}`)})
	if err := r.wait(t, 10*time.Second); err != nil {
		t.Fatalf("Serve = %v", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.hasReportLocked("j_drain0000001", "completed") {
		t.Errorf("the running job did not complete")
	}
	if len(f.reportsLocked("j_drain0000002")) > 0 {
		t.Errorf("a draining worker took a new job")
	}
	if f.disconnects != 1 {
		t.Errorf("disconnects %d", f.disconnects)
	}
	if len(f.heartbeats) != f.hbAtDisc {
		t.Errorf("%d heartbeat(s) after the disconnect", len(f.heartbeats)-f.hbAtDisc)
	}
}

// A drain that outlasts worker.drain_timeout stops the running job with its
// grace (reported cancelled with shutdown set: the orchestrator requeues it
// without spending a retry), disconnects and exits: the service manager's stop timeout would
// otherwise kill it with no grace at all.
func TestDrainTimeoutStopsTheJob(t *testing.T) {
	t.Parallel()
	f, r := setup(t, func(o *Options) { o.DrainTimeout = 400 * time.Millisecond })
	f.connected(1)
	f.submit(protocol.JobSubmitEvent{JobID: "j_drainlong001", Config: json.RawMessage(`{"steps":600,"step_seconds":0.05}`)})
	f.started("j_drainlong001")
	drained := time.Now()
	r.w.Drain()
	if err := r.wait(t, 10*time.Second); err != nil {
		t.Fatalf("Serve = %v", err)
	}
	if took := time.Since(drained); took < 400*time.Millisecond {
		t.Errorf("exited %s after the drain began, before drain_timeout", took)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.hasReportLocked("j_drainlong001", "cancelled") {
		t.Errorf("the job stopped at the drain timeout was not reported: %+v", f.reportsLocked("j_drainlong001"))
	}
	for _, rep := range f.reportsLocked("j_drainlong001") {
		if rep.Status == "cancelled" && !rep.Shutdown {
			t.Errorf("the report of the job stopped at the drain timeout lacks shutdown: %+v", rep)
		}
	}
	if f.disconnects != 1 {
		t.Errorf("disconnects %d", f.disconnects)
	}
	if !strings.Contains(r.logs.String(), "drain_timeout") {
		t.Errorf("the drain timeout was not logged")
	}
}

func TestDrainWhenIdleExits(t *testing.T) {
	t.Parallel()
	f, r := setup(t, nil)
	f.connected(1)
	r.w.Drain()
	if err := r.wait(t, 5*time.Second); err != nil {
		t.Fatalf("Serve = %v", err)
	}
}

// Stopping the worker (second SIGTERM, ctx cancelled) stops the job, reports it
// cancelled with shutdown set (an admin's stop: the orchestrator spends no
// retry on it) and disconnects.
func TestShutdownCancelsJob(t *testing.T) {
	t.Parallel()
	var opt Options
	f, r := setup(t, func(o *Options) { opt = *o })
	f.connected(1)
	f.submit(protocol.JobSubmitEvent{JobID: "j_stop00000001", Config: json.RawMessage(`{"steps":100000,"step_seconds":0.05,"ignore_sigterm":true}`)})
	f.started("j_stop00000001")
	pids := pidsOf(t, filepath.Join(opt.StateDir, "jobs", "j_stop00000001"))
	r.cancel()
	if err := r.wait(t, 10*time.Second); err != nil {
		t.Fatalf("Serve = %v", err)
	}
	waitDead(t, pids, 5*time.Second)
	rep := f.report("j_stop00000001", "cancelled")
	if !strings.Contains(rep.err(), "shutting down") || !rep.Shutdown {
		t.Errorf("cancel report error %q, shutdown %v", rep.err(), rep.Shutdown)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.disconnects != 1 {
		t.Errorf("disconnects %d", f.disconnects)
	}
}

// The orchestrator's shutdown event ends the worker cleanly.
func TestShutdownEvent(t *testing.T) {
	t.Parallel()
	f, r := setup(t, nil)
	f.connected(1)
	f.send(protocol.EventShutdown, protocol.NewShutdownEvent("worker_deleted"))
	if err := r.wait(t, 5*time.Second); err != nil {
		t.Fatalf("Serve = %v", err)
	}
	if !strings.Contains(r.logs.String(), "worker_deleted") {
		t.Errorf("reason not logged")
	}
}

// An ephemeral worker leaves on the orchestrator's drain when idle; a persistent
// one stays, in draining.
func TestOrchestratorDrain(t *testing.T) {
	t.Parallel()
	t.Run("ephemeral", func(t *testing.T) {
		t.Parallel()
		f := newFakeOrch(t)
		r := startWorker(t, f, func(o *Options) { o.Persistent = false })
		f.connected(1)
		f.send(protocol.EventDrain, protocol.DrainEvent{Type: protocol.EventDrain, Reason: "admin"})
		if err := r.wait(t, 5*time.Second); err != nil {
			t.Fatalf("Serve = %v", err)
		}
	})
	t.Run("persistent", func(t *testing.T) {
		t.Parallel()
		f, r := setup(t, nil)
		f.connected(1)
		f.mu.Lock()
		f.hbReply = protocol.HeartbeatResponse{Drain: true}
		f.mu.Unlock()
		f.waitFor("heartbeats", 5*time.Second, func() bool { return len(f.heartbeats) >= 3 })
		deadline := time.Now().Add(5 * time.Second)
		for r.w.Status() != "draining" && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond) // Status is polled like systemd does
		}
		if st := r.w.Status(); st != "draining" {
			t.Errorf("Status %q", st)
		}
		select {
		case <-r.done:
			t.Fatalf("a persistent worker left on drain: %v", r.err)
		default:
		}
	})
}

// unix:///path URLs dial the socket.
func TestUnixSocket(t *testing.T) {
	t.Parallel()
	f := newFakeOrchUnstarted(t)
	sock := filepath.Join(t.TempDir(), "orch.sock")
	if err := f.listenUnix(sock); err != nil {
		t.Fatal(err)
	}
	f.srv.Start()
	t.Cleanup(f.close)
	startWorker(t, f, func(o *Options) { o.URL = "unix://" + sock })
	f.connected(1)
	f.submit(protocol.JobSubmitEvent{JobID: "j_unix00000001", Config: json.RawMessage(`{"steps":1,"step_seconds":0}`)})
	f.report("j_unix00000001", "completed")
	f.waitFor("log over the socket", 5*time.Second, func() bool { return len(f.log["j_unix00000001-1"]) > 0 })
}
