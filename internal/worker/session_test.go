package worker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

func TestRegisterAndHeartbeat(t *testing.T) {
	t.Parallel()
	f, r := setup(t, nil)
	f.connected(1)
	f.waitFor("two heartbeats", 5*time.Second, func() bool { return len(f.heartbeats) >= 2 })

	f.mu.Lock()
	reg := f.registers[0]
	hb := f.heartbeats[0]
	f.mu.Unlock()
	if reg.Protocol != 2 || reg.Name != "test-worker" || !reg.Persistent || reg.Labels["site"] != "test" || reg.Version != "test" {
		t.Errorf("register body %+v", reg)
	}
	var info protocol.GPUInfo
	if err := json.Unmarshal(reg.GPUInfo, &info); err != nil || info.Count != 2 || info.Accelerator != "cuda" || info.VRAMGB == nil || *info.VRAMGB != 79.6 {
		t.Errorf("gpu_info %s (%v)", reg.GPUInfo, err)
	}
	if hb.WorkerID != f.workerID || hb.Status != "idle" || hb.CurrentJobID != nil || len(hb.GPUs) != 2 {
		t.Errorf("heartbeat %+v", hb)
	}
	if err := r.w.Healthy(); err != nil {
		t.Errorf("Healthy: %v", err)
	}
	if st := r.w.Status(); st != "idle" {
		t.Errorf("Status = %q", st)
	}
}

// A job runs in <work_dir>/<job_id>/ with config.json, dataloader.json and the
// environment a job is promised, and nothing of the worker's secrets.
func TestJobFilesAndEnvironment(t *testing.T) {
	t.Parallel()
	var opt Options
	f, r := setup(t, func(o *Options) {
		// Dump the environment, then become the demo trainer.
		o.Command = []string{"/bin/sh", "-c", `env > env.txt && exec "$0"`, demoTrainer}
		o.Environ = func() []string {
			return append(os.Environ(),
				"NOTIFY_SOCKET=/run/systemd/notify", "WATCHDOG_USEC=30000000", "WATCHDOG_PID=1",
				"LISTEN_FDS=1", "LISTEN_PID=1", "LISTEN_FDNAMES=x", "INVOCATION_ID=abc",
				"CREDENTIALS_DIRECTORY=/run/credentials/simpletuner-workerd.service",
				"SIMPLETUNER_WORKER_TOKEN="+f0token, "KEEP_SNEAKY=prefix-"+f0token, "KEEP_ME=1", "DROP_ME=1",
				"SIMPLETUNER_ADMIN_TOKEN=sta_admin", "SIMPLETUNER_URL=http://orch:8001")
		}
		o.PassEnv = []string{"KEEP_*"}
		opt = *o
	})
	f.connected(1)
	f.submit(protocol.JobSubmitEvent{
		JobID:       "j_files0000001",
		Config:      json.RawMessage(`{"--model_type":"lora","steps":3,"step_seconds":0.01}`),
		Dataloader:  json.RawMessage(`[{"id":"pics","type":"local"}]`),
		UploadToken: "up-secret",
		HFToken:     "hf-secret",
		Attempt:     2,
	})
	done := f.report("j_files0000001", "completed")
	if done.Attempt == nil || *done.Attempt != 2 {
		t.Errorf("completed report attempt %v", done.Attempt)
	}
	f.mu.Lock()
	reps := f.reportsLocked("j_files0000001")
	f.mu.Unlock()
	var statuses []string
	for _, rep := range reps {
		statuses = append(statuses, rep.Status)
	}
	if strings.Join(statuses, ",") != "starting,completed" {
		t.Errorf("reports %v; want starting,completed", statuses)
	}

	dir := filepath.Join(opt.StateDir, "jobs", "j_files0000001")
	if out, err := os.ReadFile(filepath.Join(dir, "output.txt")); err != nil || string(out) != "trained 3 steps\n" {
		t.Errorf("output.txt %q %v", out, err)
	}
	var cfg map[string]any
	raw, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatalf("config.json: %v", err)
	}
	if cfg["--model_type"] != "lora" || cfg["--data_backend_config"] != filepath.Join(dir, "dataloader.json") {
		t.Errorf("config.json %s", raw)
	}
	if dl, _ := os.ReadFile(filepath.Join(dir, "dataloader.json")); !bytes.Contains(dl, []byte(`"pics"`)) {
		t.Errorf("dataloader.json %s", dl)
	}

	envRaw, err := os.ReadFile(filepath.Join(dir, "env.txt"))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(string(envRaw), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = v
		}
	}
	want := map[string]string{
		"CONFIG_PATH":                 filepath.Join(dir, "config.json"),
		"SIMPLETUNER_CONFIG_BACKEND":  "json",
		"SIMPLETUNER_UPLOAD_ENDPOINT": f.url() + "/api/cloud/storage",
		"SIMPLETUNER_UPLOAD_TOKEN":    "up-secret",
		"HF_TOKEN":                    "hf-secret",
		"CUDA_VISIBLE_DEVICES":        "GPU-aaaa,GPU-bbbb",
		"SIMPLETUNER_JOB_ID":          "j_files0000001",
		"SIMPLETUNER_ATTEMPT":         "2",
		"SIMPLETUNER_DATALOADER_PATH": filepath.Join(dir, "dataloader.json"),
		"EXTRA_FROM_CONFIG":           "yes",
		"KEEP_ME":                     "1",
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("job env %s = %q; want %q", k, env[k], v)
		}
	}
	for _, k := range []string{"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID",
		"LISTEN_FDNAMES", "INVOCATION_ID", "CREDENTIALS_DIRECTORY", "SIMPLETUNER_WORKER_TOKEN", "KEEP_SNEAKY",
		"DROP_ME", "SIMPLETUNER_ADMIN_TOKEN", "SIMPLETUNER_URL"} {
		if _, ok := env[k]; ok {
			t.Errorf("job env has %s", k)
		}
	}
	if bytes.Contains(envRaw, []byte(f0token)) {
		t.Errorf("the worker token reached the job's environment")
	}

	// The log shipped is the output, in order.
	f.waitFor("log shipped", 5*time.Second, func() bool {
		return bytes.Contains(f.log["j_files0000001-2"], []byte("training finished"))
	})
	f.mu.Lock()
	logged := string(f.log["j_files0000001-2"])
	errs := f.logErrs
	f.mu.Unlock()
	if len(errs) > 0 {
		t.Errorf("log shipping errors: %v", errs)
	}
	if !strings.Contains(logged, "step 1/3") || strings.Index(logged, "step 1/3") > strings.Index(logged, "step 3/3") {
		t.Errorf("shipped log %q", logged)
	}
	// Output lines also reach the worker's own log, tagged with the job.
	if !strings.Contains(r.logs.String(), "step 3/3") || !strings.Contains(r.logs.String(), "job_id=j_files0000001") {
		t.Errorf("output lines not in the worker log")
	}
	// The outcome was acknowledged: nothing stays spooled.
	waitSpooled(t, opt.StateDir, "j_files0000001-2", false, 5*time.Second)
}

// f0token is the token every fake orchestrator accepts.
var f0token = "wt_" + strings.Repeat("A", 43) + "abcdef"

// Cancelling kills the whole process tree, including a grandchild that ignores
// SIGTERM, and reports cancelled.
func TestCancelKillsTree(t *testing.T) {
	t.Parallel()
	var opt Options
	f, _ := setup(t, func(o *Options) { opt = *o })
	f.connected(1)
	f.submit(protocol.JobSubmitEvent{
		JobID:  "j_cancel000001",
		Config: json.RawMessage(`{"steps":100000,"step_seconds":0.05,"ignore_sigterm":true}`),
	})
	f.started("j_cancel000001")
	pids := pidsOf(t, filepath.Join(opt.StateDir, "jobs", "j_cancel000001"))
	if len(pids) != 2 {
		t.Fatalf("pids %v; want the trainer and its child", pids)
	}
	f.send(protocol.EventJobCancel, protocol.JobCancelEvent{Type: protocol.EventJobCancel, JobID: "j_cancel000001", Attempt: 1, GraceSeconds: 0.2})
	rep := f.report("j_cancel000001", "cancelled")
	if rep.Attempt == nil || *rep.Attempt != 1 {
		t.Errorf("cancel report %+v", rep)
	}
	waitDead(t, pids, 5*time.Second)
}

// A job_cancel for another attempt is ignored.
func TestCancelOtherAttemptIgnored(t *testing.T) {
	t.Parallel()
	f, r := setup(t, nil)
	f.connected(1)
	f.submit(protocol.JobSubmitEvent{JobID: "j_other0000001", Attempt: 3, Config: json.RawMessage(`{"steps":100000,"step_seconds":0.05}`)})
	f.started("j_other0000001")
	f.send(protocol.EventJobCancel, protocol.JobCancelEvent{Type: protocol.EventJobCancel, JobID: "j_other0000001", Attempt: 2})
	f.send(protocol.EventPing, map[string]string{"type": "ping"})
	f.waitFor("heartbeat while busy", 5*time.Second, func() bool {
		return len(f.heartbeats) > 0 && f.heartbeats[len(f.heartbeats)-1].Status == "busy"
	})
	if st := r.w.Status(); st != "running job j_other0000001 (attempt 3)" {
		t.Errorf("Status %q", st)
	}
	// The heartbeat reply's cancel list still reaches it.
	f.mu.Lock()
	f.hbReply = protocol.HeartbeatResponse{Cancel: []string{"j_other0000001"}}
	f.mu.Unlock()
	f.report("j_other0000001", "cancelled")
}

func TestFailedExitCode(t *testing.T) {
	t.Parallel()
	f, _ := setup(t, nil)
	f.connected(1)
	f.submit(protocol.JobSubmitEvent{JobID: "j_fail00000001", Config: json.RawMessage(`{"steps":1,"step_seconds":0,"exit_code":3}`)})
	rep := f.report("j_fail00000001", "failed")
	if rep.err() != "training exited with code 3" {
		t.Errorf("error %q", rep.err())
	}
}

func TestStartFailure(t *testing.T) {
	t.Parallel()
	f, _ := setup(t, func(o *Options) { o.Command = []string{"/nonexistent/trainer"} })
	f.connected(1)
	f.submit(protocol.JobSubmitEvent{JobID: "j_nostart00001", Config: json.RawMessage(`{}`)})
	rep := f.report("j_nostart00001", "failed")
	if !strings.Contains(rep.err(), "could not start training") {
		t.Errorf("error %q", rep.err())
	}
}

// Log chunks arrive in order with offsets; dropped connections are retried from
// the acknowledged offset without gaps.
func TestLogsResumeAfterDrop(t *testing.T) {
	t.Parallel()
	f, _ := setup(t, nil)
	f.connected(1)
	f.dropLogs.Store(3)
	f.submit(protocol.JobSubmitEvent{JobID: "j_logs00000001", Config: json.RawMessage(`{"steps":40,"step_seconds":0.005}`)})
	f.report("j_logs00000001", "completed")
	f.waitFor("the whole log", 5*time.Second, func() bool {
		return bytes.HasSuffix(f.log["j_logs00000001-1"], []byte("training finished\n"))
	})
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.logDropped != 3 {
		t.Errorf("dropped %d log posts; want 3", f.logDropped)
	}
	if len(f.logErrs) > 0 {
		t.Errorf("log errors: %v", f.logErrs)
	}
	// Every line exactly once, in order: no gap, no duplicate from the retries.
	lines := strings.Split(strings.TrimSuffix(string(f.log["j_logs00000001-1"]), "\n"), "\n")
	if len(lines) != 42 || !strings.HasPrefix(lines[0], "demo-trainer: job j_logs00000001 attempt 1") {
		t.Fatalf("shipped log has %d lines:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	for i := 1; i <= 40; i++ {
		if want := fmt.Sprintf("step %d/40 ", i); !strings.HasPrefix(lines[i], want) {
			t.Errorf("line %d = %q; want %q…", i, lines[i], want)
		}
	}
}

// The terminal report is spooled while the orchestrator is down and delivered
// once it is back, before the worker registers again.
func TestTerminalReportSpooledAndResent(t *testing.T) {
	t.Parallel()
	var opt Options
	f, _ := setup(t, func(o *Options) { opt = *o })
	f.connected(1)
	f.submit(protocol.JobSubmitEvent{JobID: "j_spool0000001", Config: json.RawMessage(`{"steps":20,"step_seconds":0.02}`)})
	f.started("j_spool0000001")
	f.down.Store(true)
	f.dropStreams()
	f.srv.CloseClientConnections()

	rec := waitSpooled(t, opt.StateDir, "j_spool0000001-1", true, 10*time.Second)
	if rec.Status != "completed" || rec.Attempt != 1 {
		t.Fatalf("spooled %+v", rec)
	}
	f.mu.Lock()
	regsBefore := len(f.registers)
	f.mu.Unlock()

	// The orchestrator is back but drops the report: a registration now
	// would overtake it, so workerd must keep trying the report first.
	f.statusDown.Store(true)
	f.down.Store(false)
	f.waitFor("dropped reports", 5*time.Second, func() bool { return f.statusDrops >= 5 })
	f.statusDown.Store(false)
	done := f.report("j_spool0000001", "completed")
	f.waitFor("re-registration", 5*time.Second, func() bool { return len(f.registers) > regsBefore })
	f.mu.Lock()
	if regSeq := f.regSeqs[regsBefore]; done.Seq > regSeq {
		t.Errorf("the completed report (#%d) came after the re-registration (#%d)", done.Seq, regSeq)
	}
	f.mu.Unlock()
	waitSpooled(t, opt.StateDir, "j_spool0000001-1", false, 5*time.Second)
	if done.Attempt == nil || *done.Attempt != 1 {
		t.Errorf("report %+v", done)
	}
}

func waitFile(t *testing.T, path string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear within %s", path, timeout)
		}
		time.Sleep(10 * time.Millisecond) // polling the file system
	}
}
