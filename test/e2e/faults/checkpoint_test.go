package faults

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
	. "github.com/simpletuner/simpletuner-orchestration/test/e2e/e2etest"
)

// Checkpoints kept in the artifacts: a lost worker costs at most the steps
// since its last kept checkpoint.

// checkpointTOML is [job] for workers that keep checkpoints, looking at the
// output directory every 100 ms, uploading at rate ("0": unbounded).
func checkpointTOML(rate string) string {
	return fmt.Sprintf("checkpoint_scan_interval = \"100ms\"\ncheckpoint_upload_rate = %q\n", rate)
}

var (
	stepLine    = regexp.MustCompile(`(?m)^step (\d+)/\d+ `)
	resumedLine = regexp.MustCompile(`resumed from checkpoint-(\d+) at step (\d+)`)
)

// keptStep is the step of the job's newest complete checkpoint, -1 for none.
func keptStep(o *Orch, id string) int {
	cp, _ := o.Job(id)["checkpoint"].(map[string]any)
	if s, ok := cp["step"].(float64); ok {
		return int(s)
	}
	return -1
}

// resumeOf reads the job's log: the last step attempt 1 trained, the step
// the retry resumed from, the retry's first step, and all the steps trained.
func resumeOf(t *testing.T, log string) (lastOfFirst, resumed, firstOfRetry, total int) {
	t.Helper()
	m := resumedLine.FindStringSubmatchIndex(log)
	if m == nil {
		t.Fatalf("the retry did not resume from a checkpoint:\n%s", log)
	}
	resumed, _ = strconv.Atoi(log[m[2]:m[3]])
	for _, s := range stepLine.FindAllStringSubmatch(log[:m[0]], -1) {
		lastOfFirst, _ = strconv.Atoi(s[1])
	}
	if s := stepLine.FindStringSubmatch(log[m[1]:]); s != nil {
		firstOfRetry, _ = strconv.Atoi(s[1])
	}
	return lastOfFirst, resumed, firstOfRetry, len(stepLine.FindAllString(log, -1))
}

// kill -9 of the workerd running a job right after a checkpoint was kept:
// the retry, on another worker, resumes from that checkpoint, and the steps
// trained in all are at most steps + checkpointing_steps.
func TestKill9WorkerResumesFromCheckpoint(t *testing.T) {
	const steps, k = 60, 5
	o := StartOrchestratorWith(t, OrchOptions{Metrics: true})
	h := NewHistory(t, o)
	cmd := h.ExecWrapperCommand()
	a := o.StartWorker(WorkerSpec{Name: "a", Persistent: true, Command: cmd, JobTOML: checkpointTOML("0")})
	// Attempt 1 waits after step 20, so the kill lands mid-training on any machine.
	_, id := h.Submit(map[string]any{"steps": steps, "step_seconds": 0.1, "checkpointing_steps": k, "output_dir": "out",
		"pause_after_step": 20}, nil)
	kept := -1
	Eventually(t, 30*time.Second, "a checkpoint at step 15 or later kept", func() bool { kept = keptStep(o, id); return kept >= 15 })
	h.Fault("kill -9 worker a right after checkpoint-%d of %s was kept", kept, id)
	a.P.Kill9()
	b := o.StartWorker(WorkerSpec{Name: "b", Persistent: true, Command: cmd, JobTOML: checkpointTOML("0")})
	h.WaitAllTerminal(60 * time.Second)
	h.Finish()
	sum := h.Check(Expect{MaxRequeues: -1, Statuses: []string{"completed"}})
	at := Attempts(h.Final[id])
	if len(at) != 2 || at[0]["outcome"] != "worker_lost" || at[0]["worker_id"] != a.ID || at[1]["worker_id"] != b.ID {
		t.Fatalf("attempts %v: want attempt 1 lost on a, attempt 2 on b", at)
	}
	log := o.Logs(id)
	lastOfFirst, resumed, first, total := resumeOf(t, log)
	if resumed < kept || first != resumed+1 {
		t.Errorf("the retry resumed at %d (first step %d); checkpoint-%d was kept before the kill", resumed, first, kept)
	}
	if total > steps+k {
		t.Errorf("%d steps trained in all for %d, more than steps + checkpointing_steps (%d)", total, steps, steps+k)
	}
	if !strings.Contains(log, fmt.Sprintf("simpletuner-workerd: resuming from checkpoint-%d", resumed)) {
		t.Errorf("no resume line from workerd in the job's log")
	}
	t.Logf("RESULT %s: %s; attempt 1 reached step %d, checkpoint-%d kept before the kill; the retry on b resumed at step %d; %d steps trained in all for %d (at most %d)",
		t.Name(), sum, lastOfFirst, kept, resumed, total, steps, steps+k)
}

// A checkpoint leaves the worker as the trainer finishes it: workerd watches
// the output directory (inotify), so on a worker that scans only once an
// hour every checkpoint up to the one the job waits after is kept while the
// job runs, as the job's own uid.
func TestCheckpointsLeaveAsWritten(t *testing.T) {
	const k = 5
	o := StartOrchestratorWith(t, OrchOptions{Metrics: true})
	h := NewHistory(t, o)
	o.StartWorker(WorkerSpec{Name: "a", Persistent: true, Command: h.ExecWrapperCommand(),
		JobTOML: "checkpoint_scan_interval = \"1h\"\ncheckpoint_upload_rate = \"0\"\n"})
	_, id := h.Submit(map[string]any{"steps": 40, "step_seconds": 0.05, "checkpointing_steps": k, "output_dir": "out",
		"pause_after_step": 20}, nil)
	Eventually(t, 60*time.Second, "step 20 trained", func() bool { return strings.Contains(o.Logs(id), "step 20/40 ") })
	seen := time.Now()
	Eventually(t, 30*time.Second, "checkpoint-20 kept while the job waits", func() bool { return keptStep(o, id) == 20 })
	took := time.Since(seen)
	if st := o.Job(id)["status"]; st != "running" {
		t.Fatalf("the job is %v, want running: the checkpoint must leave while it trains", st)
	}
	if st, _ := o.Do("POST", "/api/queue/"+id+"/cancel", nil); st != 200 {
		t.Fatalf("cancel: %d", st)
	}
	h.WaitAllTerminal(60 * time.Second)
	h.Finish()
	sum := h.Check(Expect{Statuses: []string{"cancelled"}})
	t.Logf("RESULT %s: %s; checkpoint-20 kept %.2f s after step 20 showed in the log, with checkpoint_scan_interval 1h",
		t.Name(), sum, took.Seconds())
}

// systemctl stop of the workerd running a job whose checkpoints the watcher
// has not picked up yet (it looks only once an hour here, without inotify):
// on its way out,
// after the drain and the trainer's stop, workerd uploads the newest finished
// checkpoint before it reports the job, and the retry on another worker
// resumes from it.
func TestWorkerStopKeepsTheLastCheckpoint(t *testing.T) {
	const steps, k = 200, 5
	o := StartOrchestratorWith(t, OrchOptions{Metrics: true})
	h := NewHistory(t, o)
	cmd := h.ExecWrapperCommand()
	a := o.StartWorker(WorkerSpec{Name: "a", Persistent: true, Command: cmd, CancelGrace: "5s",
		WorkerTOML: "drain_timeout = \"300ms\"\n", JobTOML: "checkpoint_scan_interval = \"1h\"\ncheckpoint_watch = false\ncheckpoint_upload_rate = \"0\"\n"})
	// Attempt 1 waits after step 20, so the stop lands mid-training on any machine.
	_, id := h.Submit(map[string]any{"steps": steps, "step_seconds": 0.05, "checkpointing_steps": k, "output_dir": "out",
		"pause_after_step": 20}, nil)
	reached := 0
	Eventually(t, 60*time.Second, "step 20 trained", func() bool {
		for _, m := range stepLine.FindAllStringSubmatch(o.Logs(id), -1) {
			reached, _ = strconv.Atoi(m[1])
		}
		return reached >= 20
	})
	if kept := keptStep(o, id); kept != -1 {
		t.Fatalf("checkpoint-%d was kept while the job ran; this test needs the watcher not to have looked", kept)
	}
	h.Fault("SIGTERM (systemctl stop) worker a while %s trains (step %d reached, no checkpoint kept yet)", id, reached)
	a.P.Signal(syscall.SIGTERM)
	if code, ok := a.P.Exited(30 * time.Second); !ok || code != 0 {
		t.Fatalf("worker a exited %d (exited: %v), want 0", code, ok)
	}
	kept := keptStep(o, id)
	if kept < reached/k*k {
		t.Fatalf("after the stop the newest kept checkpoint is at step %d; the trainer had finished checkpoint-%d before the signal", kept, reached/k*k)
	}
	// b takes the requeued job at once: it is never seen idle.
	b := o.StartWorker(WorkerSpec{Name: "b", Persistent: true, Command: cmd, JobTOML: checkpointTOML("0"), NoWait: true})
	h.WaitAllTerminal(90 * time.Second)
	h.Finish()
	sum := h.Check(Expect{MaxRequeues: -1, Statuses: []string{"completed"}})
	at := Attempts(h.Final[id])
	if len(at) != 2 || at[0]["worker_id"] != a.ID || at[1]["worker_id"] != b.ID {
		t.Fatalf("attempts %v: want attempt 1 on a, attempt 2 on b", at)
	}
	if used := h.Final[id]["retries_used"]; used != float64(0) {
		t.Errorf("the stop of worker a spent %v retries of the job; an admin's stop spends none", used)
	}
	_, resumed, first, total := resumeOf(t, o.Logs(id))
	if resumed != kept || first != kept+1 {
		t.Errorf("the retry resumed at %d (first step %d), want checkpoint-%d, uploaded on the way out", resumed, first, kept)
	}
	t.Logf("RESULT %s: %s; stopped at step %d or later with nothing kept; checkpoint-%d uploaded on the way out; the retry on b resumed from it; %d steps trained in all for %d",
		t.Name(), sum, reached, kept, total, steps)
}

// kill -9 of the workerd while it uploads a checkpoint: the half-uploaded
// one never becomes complete, and the retry resumes from the one before it.
func TestKill9DuringCheckpointUpload(t *testing.T) {
	fullOnly(t)
	o := StartOrchestratorWith(t, OrchOptions{Metrics: true})
	h := NewHistory(t, o)
	cmd := h.ExecWrapperCommand()
	// 16 MiB checkpoints at 8 MiB/s: each takes 2 s to upload.
	a := o.StartWorker(WorkerSpec{Name: "a", Persistent: true, Command: cmd, JobTOML: checkpointTOML("8M")})
	_, id := h.Submit(map[string]any{"steps": 40, "step_seconds": 0.25, "checkpointing_steps": 4, "output_dir": "out",
		"checkpoint_bytes": 16 << 20}, nil)
	kept := -1
	Eventually(t, 60*time.Second, "a first checkpoint kept", func() bool { kept = keptStep(o, id); return kept > 0 })
	half := ""
	Eventually(t, 60*time.Second, "a later checkpoint part-uploaded", func() bool {
		_, m := o.Do("GET", "/api/queue/"+id+"/artifacts?attempt=1", nil)
		arts, _ := m["artifacts"].([]any)
		for _, x := range arts {
			p, _ := x.(map[string]any)["path"].(string)
			if dir, ok := strings.CutPrefix(p, "checkpoints/"); ok && !strings.HasPrefix(dir, fmt.Sprintf("checkpoint-%d/", kept)) {
				half, _, _ = strings.Cut(dir, "/")
				return keptStep(o, id) == kept
			}
		}
		return false
	})
	h.Fault("kill -9 worker a while it uploads %s of %s (checkpoint-%d kept)", half, id, kept)
	a.P.Kill9()
	if now := keptStep(o, id); now != kept {
		t.Fatalf("after the kill the newest complete checkpoint is at step %d, want %d", now, kept)
	}
	o.StartWorker(WorkerSpec{Name: "b", Persistent: true, Command: cmd, JobTOML: checkpointTOML("0")})
	h.WaitAllTerminal(90 * time.Second)
	h.Finish()
	sum := h.Check(Expect{MaxRequeues: -1, Statuses: []string{"completed"}})
	_, resumed, first, total := resumeOf(t, o.Logs(id))
	if resumed != kept || first != kept+1 {
		t.Errorf("the retry resumed at %d (first step %d), want the checkpoint kept before the kill, %d", resumed, first, kept)
	}
	// What was uploaded of the half one went with the retry's first commit.
	_, m := o.Do("GET", "/api/queue/"+id+"/artifacts?attempt=1", nil)
	if strings.Contains(fmt.Sprint(m["artifacts"]), "checkpoints/"+half+"/") {
		t.Errorf("the half-uploaded %s is still stored: %v", half, m["artifacts"])
	}
	t.Logf("RESULT %s: %s; killed while %s was uploading; the retry resumed from checkpoint-%d; %d steps trained in all for 40",
		t.Name(), sum, half, resumed, total)
}

// The artifacts' disk is full: the job trains on, each checkpoint not kept
// is said in its log and in workerd's, and it completes.
func TestCheckpointsOnAFullArtifactDisk(t *testing.T) {
	fs := testutil.SmallFS(t, "8m")
	o := StartOrchestratorWith(t, OrchOptions{Metrics: true,
		ExtraTOML: fmt.Sprintf("[artifacts]\ndir = %q\n", filepath.Join(fs, "artifacts"))})
	h := NewHistory(t, o)
	w := o.StartWorker(WorkerSpec{Name: "w", Persistent: true, Command: h.WrapperCommand(), JobTOML: checkpointTOML("0")})
	h.Fault("fill the filesystem of the artifacts")
	testutil.Fill(t, fs)
	_, id := h.Submit(map[string]any{"steps": 20, "step_seconds": 0.1, "checkpointing_steps": 5, "output_dir": "out",
		"checkpoint_bytes": 1 << 20}, nil)
	h.WaitAllTerminal(60 * time.Second)
	h.Finish()
	sum := h.Check(Expect{MaxRequeues: 0, Statuses: []string{"completed"}})
	log := o.Logs(id)
	if n := strings.Count(log, "is not kept: the artifact store is full"); n < 1 || strings.Count(log, "step 20/20") != 1 {
		t.Fatalf("job log (%d not kept):\n%s", n, log)
	}
	if !strings.Contains(w.P.Output(), "checkpoint not kept; training goes on") {
		t.Error("no warning in workerd's log")
	}
	t.Logf("RESULT %s: %s; %d checkpoints not kept for the full disk, the job completed", t.Name(), sum,
		strings.Count(log, "is not kept: the artifact store is full"))
}

// A 2 GiB checkpoint is kept and restored with workerd's peak RSS below
// 128 MiB on both sides; the upload and restore rates are measured.
func TestCheckpoint2GiB(t *testing.T) {
	fullOnly(t)
	o := StartOrchestratorWith(t, OrchOptions{Metrics: true})
	h := NewHistory(t, o)
	cmd := h.ExecWrapperCommand()
	a := o.StartWorker(WorkerSpec{Name: "a", Persistent: true, Command: cmd, JobTOML: checkpointTOML("0")})
	// Attempt 1 waits after checkpoint-2, however long its upload takes on
	// this machine; the kill follows once it is kept.
	_, id := h.Submit(map[string]any{"steps": 6, "step_seconds": 1, "checkpointing_steps": 2, "output_dir": "out",
		"checkpoint_bytes": 2 << 30, "checkpoint_sparse": true, "pause_after_step": 2}, nil)
	Eventually(t, 60*time.Second, "checkpoint-2 kept", func() bool { return keptStep(o, id) >= 2 })
	up := 0.0
	Eventually(t, 30*time.Second, "the kept line in the job's log", func() bool { up = keptSeconds(o.Logs(id)); return up > 0 })
	peakA := PeakRSSKiB(a.P.Pid())
	h.Fault("kill -9 worker a after a 2 GiB checkpoint was kept")
	a.P.Kill9()
	b := o.StartWorker(WorkerSpec{Name: "b", Persistent: true, Command: cmd, JobTOML: checkpointTOML("0")})
	h.WaitAllTerminal(180 * time.Second)
	peakB := PeakRSSKiB(b.P.Pid())
	h.Finish()
	sum := h.Check(Expect{MaxRequeues: -1, Statuses: []string{"completed"}})
	log := o.Logs(id)
	_, resumed, _, _ := resumeOf(t, log)
	m := regexp.MustCompile(`resuming from checkpoint-\d+ \(step \d+, kept by attempt 1\), restored in ([0-9.]+) s`).FindStringSubmatch(log)
	if m == nil || resumed < 2 {
		t.Fatalf("no restore of the 2 GiB checkpoint:\n%s", log)
	}
	restore, _ := strconv.ParseFloat(m[1], 64)
	for name, kib := range map[string]int64{"a (upload)": peakA, "b (restore)": peakB} {
		if kib <= 0 || kib >= 128<<10 {
			t.Errorf("worker %s peak RSS %d KiB; want below 128 MiB", name, kib)
		}
	}
	t.Logf("RESULT %s: %s; 2 GiB checkpoint uploaded in %.1f s (%.0f MiB/s), restored in %.1f s (%.0f MiB/s); workerd peak RSS %.1f MiB uploading, %.1f MiB restoring",
		t.Name(), sum, up, 2048/up, restore, 2048/restore, float64(peakA)/1024, float64(peakB)/1024)
}

// keptSeconds is how long the first checkpoint kept took to upload, from
// the job's log; 0 before it is there.
func keptSeconds(log string) float64 {
	m := regexp.MustCompile(`checkpoint-\d+ \(step \d+, [0-9.]+ [KMG]?i?B, \d+ files\) kept in the artifact store in ([0-9.]+) s`).FindStringSubmatch(log)
	if m == nil {
		return 0
	}
	s, _ := strconv.ParseFloat(m[1], 64)
	return s
}
