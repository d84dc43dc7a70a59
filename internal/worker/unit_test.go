package worker

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/isolation"
	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

func TestBackoffCappedFullJitter(t *testing.T) {
	t.Parallel()
	b := newBackoff(time.Second, 60*time.Second)
	var asked []int64
	b.rand = func(n int64) int64 { asked = append(asked, n); return n - 1 }
	for i := 0; i < 10; i++ {
		if d := b.next(); d >= 60*time.Second {
			t.Errorf("delay %d = %s; must stay below the cap", i, d)
		}
	}
	want := []time.Duration{1, 2, 4, 8, 16, 32, 60, 60, 60, 60}
	for i, n := range asked {
		if time.Duration(n) != want[i]*time.Second {
			t.Errorf("retry %d drew from [0, %s); want [0, %s)", i, time.Duration(n), want[i]*time.Second)
		}
	}
	b.reset()
	if b.attempts() != 0 || b.ceiling(b.attempts()) != time.Second {
		t.Errorf("reset: attempts %d", b.attempts())
	}
	// Real randomness: spread over [0, ceiling), not pinned to the ceiling.
	b = newBackoff(time.Second, 8*time.Second)
	seen := map[time.Duration]bool{}
	for i := 0; i < 200; i++ {
		b.n = 10
		d := b.next()
		if d < 0 || d >= 8*time.Second {
			t.Fatalf("delay %s out of [0, 8s)", d)
		}
		seen[d/time.Second] = true
	}
	if len(seen) < 4 {
		t.Errorf("delays not jittered: %v", seen)
	}
	// Huge attempt counts do not overflow.
	b.n = 1000
	if d := b.next(); d < 0 || d >= 8*time.Second {
		t.Errorf("delay after 1000 retries %s", d)
	}
}

func TestReadSSE(t *testing.T) {
	t.Parallel()
	stream := ": comment\n" +
		"id: 1\nevent: job_submit\ndata: {\"type\":\"job_submit\",\"job_id\":\"j_1\"}\n\n" +
		"event: ping\r\ndata: {}\r\n\r\n" + // CRLF
		"data:{\"a\":1}\rdata: second\r\r" + // CR, no space, two data lines
		"id: 7\nevent: x\n\n" + // no data: not dispatched, but the id sticks
		"retry: 5\nunknown: field\ndata\n\n" + // "data" with no colon is an empty data line
		"data: {\"type\":\"drain\"}\n\n" +
		"data: unterminated"
	var got []sseEvent
	err := readSSE(iotest.OneByteReader(strings.NewReader(stream)), func(ev sseEvent) error {
		got = append(got, ev)
		return nil
	})
	if !errors.Is(err, io.EOF) {
		t.Errorf("err = %v; want EOF", err)
	}
	want := []sseEvent{
		{ID: "1", Event: "job_submit", Data: `{"type":"job_submit","job_id":"j_1"}`},
		{ID: "1", Event: "ping", Data: "{}"},
		{ID: "1", Data: "{\"a\":1}\nsecond"},
		{ID: "7", Data: ""},
		{ID: "7", Data: `{"type":"drain"}`},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("events\n got %#v\nwant %#v", got, want)
	}
}

func TestReadSSEEmitError(t *testing.T) {
	t.Parallel()
	stop := errors.New("stop")
	err := readSSE(strings.NewReader("data: 1\n\ndata: 2\n\n"), func(sseEvent) error { return stop })
	if !errors.Is(err, stop) {
		t.Errorf("err = %v", err)
	}
}

func FuzzReadSSE(f *testing.F) {
	f.Add([]byte("event: job_submit\ndata: {}\n\n"))
	f.Add([]byte("data: a\r\ndata: b\r\r\n:c\n\n"))
	f.Add([]byte("id: \x00\ndata\n\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = readSSE(bytes.NewReader(b), func(ev sseEvent) error {
			if strings.ContainsAny(ev.Event, "\r\n") || strings.ContainsAny(ev.ID, "\r\n") {
				t.Fatalf("line break inside a field: %#v", ev)
			}
			return nil
		})
	})
}

// A job inherits only the allowlist and job.pass_env of workerd's
// environment, never a secret-like name, never the worker token under any
// name; [job] env and the job's own variables are set as given.
func TestJobEnv(t *testing.T) {
	t.Parallel()
	tok := "wt_secret_token_value_1234567890"
	ev := &protocol.JobSubmitEvent{JobID: "j_x", Attempt: 3, UploadEndpoint: "/api/cloud/storage", UploadToken: "", HFToken: "hf_job"}
	env := jobEnv(jobEnvInput{
		Base: []string{"PATH=/usr/bin", "NOTIFY_SOCKET=/run/n", "LISTEN_FDS=2", "WATCHDOG_USEC=1", "SIMPLETUNER_WORKER_TOKEN=" + tok,
			"OTHER_NAME=" + tok, "HOME=/var/lib/x", "CUDA_VISIBLE_DEVICES=7", "NCCL_SOCKET_IFNAME=ib0", "LC_ALL=C.UTF-8", "TZ=UTC",
			"SIMPLETUNER_ADMIN_TOKEN=sta_x", "SIMPLETUNER_URL=http://orch:8001", "FOO=y", "NVIDIA_API_KEY=nvapi",
			"HF_HOME=/srv/hf", "HF_TOKEN=hf_admins", "VIRTUAL_ENV=/opt/venv", "VIRTUAL_ENV_PROMPT=(venv)", "PYTHONPATH=/x",
			"HF_PASS=" + tok, "NOEQUALS"},
		Pass:            []string{"HF_*", "VIRTUAL_ENV"},
		Extra:           map[string]string{"HOME": "/home/train", "CONFIG_PATH": "/not/this", "WANDB_API_KEY": "explicit"},
		Token:           tok,
		Files:           jobFiles{Dir: "/w/j_x", ConfigPath: "/w/j_x/config.json"},
		Event:           ev,
		OrchestratorURL: "https://orch:8001/",
	})
	m := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	want := map[string]string{
		"PATH": "/usr/bin", "HOME": "/home/train", "CONFIG_PATH": "/w/j_x/config.json",
		"SIMPLETUNER_CONFIG_BACKEND": "json", "SIMPLETUNER_UPLOAD_ENDPOINT": "https://orch:8001/api/cloud/storage",
		"SIMPLETUNER_UPLOAD_TOKEN": "", "SIMPLETUNER_JOB_ID": "j_x", "SIMPLETUNER_ATTEMPT": "3",
		"CUDA_VISIBLE_DEVICES": "7", // no GPU inventory: the inherited value stays
		"NCCL_SOCKET_IFNAME":   "ib0", "LC_ALL": "C.UTF-8", "TZ": "UTC",
		"HF_HOME": "/srv/hf", "VIRTUAL_ENV": "/opt/venv", // job.pass_env
		"HF_TOKEN":      "hf_job",   // the job's own, not workerd's
		"WANDB_API_KEY": "explicit", // [job] env is the admin's explicit choice
	}
	for k, v := range want {
		if got, ok := m[k]; !ok || got != v {
			t.Errorf("%s = %q (set %v); want %q", k, got, ok, v)
		}
	}
	for _, k := range []string{"NOTIFY_SOCKET", "LISTEN_FDS", "WATCHDOG_USEC", "SIMPLETUNER_WORKER_TOKEN", "OTHER_NAME",
		"SIMPLETUNER_ADMIN_TOKEN", "SIMPLETUNER_URL", "FOO", "NVIDIA_API_KEY", "VIRTUAL_ENV_PROMPT", "PYTHONPATH", "HF_PASS", "NOEQUALS"} {
		if _, ok := m[k]; ok {
			t.Errorf("%s passed to the job", k)
		}
	}
}

// Secret-like names never pass through job.pass_env, which refuses them.
func TestInherits(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]bool{
		"PATH": true, "LC_CTYPE": true, "CUDA_HOME": true, "HSA_OVERRIDE_GFX_VERSION": true,
		"CUDA_TOKEN": false, "HOSTNAME": false, "SSH_AUTH_SOCK": false, "hf_home": false,
		"HF_HOME": true, "HF_TOKEN": false, "HF_HUB_TOKEN_PATH": false, "AWS_SECRET_ACCESS_KEY": false, "MY_password": false,
	} {
		if got := inherits(name, []string{"HF_*"}); got != want {
			t.Errorf("inherits(%q) = %v; want %v", name, got, want)
		}
	}
}

func TestPointAtDataloader(t *testing.T) {
	t.Parallel()
	cases := []struct{ in, key string }{
		{`{"--model_type":"lora"}`, "--data_backend_config"},
		{`{"model_type":"lora"}`, "data_backend_config"},
		{`{"data_backend_config":"/orch/path.json","--x":1}`, "data_backend_config"},
		{`{}`, "data_backend_config"},
	}
	for _, c := range cases {
		var m map[string]any
		if err := json.Unmarshal(pointAtDataloader([]byte(c.in), "/w/dl.json"), &m); err != nil {
			t.Fatal(err)
		}
		if m[c.key] != "/w/dl.json" {
			t.Errorf("%s → %v; want %s set", c.in, m, c.key)
		}
	}
	if got := pointAtDataloader([]byte(`[1,2]`), "/x"); string(got) != `[1,2]` {
		t.Errorf("non-object changed: %s", got)
	}
}

func TestPrepareJobDirRejectsBadIDs(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"", "..", "../etc", "a/b", ".hidden"} {
		if _, err := jobDir(t.TempDir(), id); err == nil {
			t.Errorf("job id %q accepted", id)
		}
	}
	if _, err := prepareJobDir(t.TempDir(), &protocol.JobSubmitEvent{JobID: "j_ok", Config: json.RawMessage(`{bad`)}); err == nil {
		t.Errorf("invalid config JSON accepted")
	}
}

func TestLogSpoolLimitAndJournal(t *testing.T) {
	t.Parallel()
	var journal bytes.Buffer
	path := filepath.Join(t.TempDir(), "j-1.log")
	s := newLogSpool(path, 20, slog.New(slog.NewTextHandler(&journal, nil)))
	_, _ = s.Write([]byte("line one\nprogress 1\rprogress 2\r"))
	_, _ = s.Write([]byte("line two\n" + strings.Repeat("x", 5000) + "\ntail"))
	_ = s.Close()
	got, _ := os.ReadFile(path)
	if !bytes.HasPrefix(got, []byte("line one\nprogress 1\r")) || !bytes.Contains(got, []byte("log limit of 20 bytes reached")) {
		t.Errorf("spool %q", got)
	}
	if size, closed := s.state(); size != int64(len(got)) || !closed {
		t.Errorf("state %d %v; file has %d", size, closed, len(got))
	}
	j := journal.String()
	for _, want := range []string{"msg=\"line one\"", "msg=\"progress 2\"", "msg=\"line two\"", "msg=tail", "…"} {
		if !strings.Contains(j, want) {
			t.Errorf("journal lacks %s:\n%s", want, j)
		}
	}
	if strings.Contains(j, strings.Repeat("x", maxJournalLine+1)) {
		t.Errorf("an over-long line reached the journal uncut")
	}
}

func TestProcessExitDescriptions(t *testing.T) {
	t.Parallel()
	cases := []struct {
		script string
		ok     bool
		desc   string
	}{
		{"exit 0", true, ""},
		{"exit 7", false, "training exited with code 7"},
		{"kill -SEGV $$", false, "killed by signal SIGSEGV"},
	}
	for _, c := range cases {
		var out testutil.Buffer
		dir := t.TempDir()
		p, err := startProcess([]string{"/bin/sh", "-c", c.script}, dir, nil, &out, plainJob(t, dir), nil)
		if err != nil {
			t.Fatal(err)
		}
		<-p.Done()
		if ok, desc := p.exitDescription(); ok != c.ok || desc != c.desc {
			t.Errorf("%s: %v %q", c.script, ok, desc)
		}
	}
}

// The leader's exit takes its background children with it.
func TestProcessGroupKilledWhenLeaderExits(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var out testutil.Buffer
	p, err := startProcess([]string{"/bin/sh", "-c", "sleep 300 & echo $! > child.pid; exit 0"}, dir, nil, &out, plainJob(t, dir), nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the run did not end: the orphan kept the pipe open")
	}
	raw, _ := os.ReadFile(filepath.Join(dir, "child.pid"))
	var pid int
	if _, err := fmtSscan(strings.TrimSpace(string(raw)), &pid); err != nil {
		t.Fatal(err)
	}
	waitDead(t, []int{pid}, 5*time.Second)
}

func TestProcessStopGraceThenKill(t *testing.T) {
	t.Parallel()
	var out testutil.Buffer
	lw := &out
	dir := t.TempDir()
	p, err := startProcess([]string{"/bin/sh", "-c", `trap 'echo got TERM' TERM; echo ready; while :; do sleep 0.01; done`}, dir, nil, lw, plainJob(t, dir), nil)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(lw.String(), "ready") && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // until the trap is installed
	}
	began := time.Now()
	p.Stop(200 * time.Millisecond)
	select {
	case <-p.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("not killed after the grace period")
	}
	if el := time.Since(began); el < 150*time.Millisecond {
		t.Errorf("killed after %s, before the grace period", el)
	}
	if ok, desc := p.exitDescription(); ok || desc != "killed by signal SIGKILL" {
		t.Errorf("%v %q", ok, desc)
	}
	if !strings.Contains(lw.String(), "got TERM") {
		t.Errorf("SIGTERM not delivered first: %q", lw.String())
	}
}

// plainJob is a job that is its own process group and runs as this process's
// user, as the worker's jobs are in tests without an isolator.
func plainJob(t *testing.T, dir string) *isolation.Job {
	t.Helper()
	iso, err := isolation.New(isolation.Config{Mode: isolation.ModeProcessGroup, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	j, err := iso.Start("j_test", 1, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// A job that prints nothing costs no file; its first byte makes one.
func TestLogSpoolFileMadeByFirstOutput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	silent := newLogSpool(filepath.Join(dir, "j-1.log"), 0, slog.New(slog.DiscardHandler))
	if err := silent.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "j-1.log")); !os.IsNotExist(err) {
		t.Errorf("a silent job's spool file: %v", err)
	}
	if size, closed := silent.state(); size != 0 || !closed {
		t.Errorf("state %d %v", size, closed)
	}
	talks := newLogSpool(filepath.Join(dir, "j-2.log"), 0, slog.New(slog.DiscardHandler))
	_, _ = talks.Write([]byte("hello\n"))
	_ = talks.Close()
	if got, err := os.ReadFile(filepath.Join(dir, "j-2.log")); string(got) != "hello\n" {
		t.Errorf("spool %q (%v)", got, err)
	}
}

// A job that prints nothing costs its shipper no read buffer: the 256 KiB
// buffer is made with the spool's file, by the first output. (Not parallel:
// it counts the bytes the whole program allocates.)
func TestLogShipperOfASilentJobMakesNoBuffer(t *testing.T) {
	dir := t.TempDir()
	const runs = 20
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range runs {
		silent := newLogSpool(filepath.Join(dir, "j-"+strconv.Itoa(i)+".log"), 0, slog.New(slog.DiscardHandler))
		_ = silent.Close()
		sh := newShipper(nil, "/log", 1, silent, time.Hour, time.Second, time.Second, slog.New(slog.DiscardHandler))
		sh.run(t.Context())
	}
	runtime.ReadMemStats(&after)
	if perRun := (after.TotalAlloc - before.TotalAlloc) / runs; perRun >= maxLogChunk/2 {
		t.Fatalf("a silent job's shipper allocated %d bytes (the read buffer is %d)", perRun, maxLogChunk)
	}
}

// A heartbeat reply's cancel is for the attempt that heartbeat listed: a
// newer attempt of the same job, dispatched here since, keeps running.
func TestHeartbeatCancelIsForTheListedAttempt(t *testing.T) {
	t.Parallel()
	w, err := New(Options{URL: "http://127.0.0.1:1", Token: "wt_x", StateDir: t.TempDir(), Command: []string{"true"},
		ReconnectMax: time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	a := &runner{jobID: "j_a", n: 2, log: slog.New(slog.DiscardHandler)}
	w.slots.jobs["j_a"] = a
	reply := protocol.HeartbeatResponse{Success: true, Cancel: []string{"j_a"}}
	if _, err := w.handle(t.Context(), &session{}, heartbeatReply{resp: reply, listed: map[string]int{"j_a": 1}}); err != nil {
		t.Fatal(err)
	}
	if a.stop != notStopped {
		t.Fatalf("attempt 2 stopped by a cancel meant for attempt 1: %v", a.stop)
	}
	if _, err := w.handle(t.Context(), &session{}, heartbeatReply{resp: reply, listed: map[string]int{"j_a": 2}}); err != nil {
		t.Fatal(err)
	}
	if a.stop != stopCancel {
		t.Fatalf("attempt 2 not stopped by a cancel meant for it: %v", a.stop)
	}
}

// A job sent while an attempt here is stopping (its room already freed by
// the orchestrator) waits for the stop instead of being refused; a cancel
// of it drops it.
func TestSubmitWaitsForAStoppingAttempt(t *testing.T) {
	t.Parallel()
	w, err := New(Options{URL: "http://127.0.0.1:1", Token: "wt_x", StateDir: t.TempDir(), Command: []string{"true"},
		ReconnectMax: time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	old := &runner{jobID: "j_old", n: 1, log: slog.New(slog.DiscardHandler)}
	w.slots.jobs["j_old"] = old
	w.onSubmit(t.Context(), &protocol.JobSubmitEvent{JobID: "j_new", Attempt: 1})
	if len(w.deferred) != 0 {
		t.Fatal("a job refused beside a running attempt was kept")
	}
	old.stop = stopAbandon
	w.onSubmit(t.Context(), &protocol.JobSubmitEvent{JobID: "j_new", Attempt: 1})
	if len(w.deferred) != 1 || w.slots.holder("j_new") != nil {
		t.Fatalf("deferred %v, jobs %v", w.deferred, w.slots.jobs)
	}
	data, _ := json.Marshal(protocol.JobCancelEvent{Type: protocol.EventJobCancel, JobID: "j_new", Attempt: 1})
	if _, err := w.onEvent(t.Context(), sseEvent{Event: protocol.EventJobCancel, Data: string(data)}); err != nil {
		t.Fatal(err)
	}
	if len(w.deferred) != 0 {
		t.Fatal("a cancelled job still waits")
	}
}
