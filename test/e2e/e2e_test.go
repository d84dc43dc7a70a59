package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/pgtest"
	. "github.com/simpletuner/simpletuner-orchestration/test/e2e/e2etest"
)

func TestMain(m *testing.M) { Main(m) }

// slowJob trains for about seconds in 0.1 s steps.
func slowJob(seconds float64) map[string]any {
	return map[string]any{"steps": int(seconds * 10), "step_seconds": 0.1}
}

func TestJobSeesItsFilesAndEnvironment(t *testing.T) {
	t.Parallel()
	o := StartOrchestrator(t, "")
	script := `env > env.txt; cp "$CONFIG_PATH" seen-config.json; pwd > pwd.txt; echo done`
	// workerd started from a shell like the README's quick start: an admin
	// token and the orchestrator's URL exported, and more.
	w := o.StartWorker(WorkerSpec{Name: "env", Persistent: true, Command: []string{"/bin/sh", "-c", script},
		Env: []string{"SIMPLETUNER_ADMIN_TOKEN=" + o.Admin, "SIMPLETUNER_URL=" + o.URL, "FOO=y", "BAR=z", "BAR_TOKEN=t",
			"NCCL_DEBUG=INFO"},
		JobTOML: "pass_env = [\"BAR*\"]\n"})
	id := o.Submit(map[string]any{"model_type": "lora", "learning_rate": 0.0001}, map[string]any{"hf_token": "hf_e2e_secret"})
	o.WaitJob(id, "completed", 20*time.Second)

	jobDir := filepath.Join(w.Dir, "state", "jobs", id)
	pwd, err := os.ReadFile(filepath.Join(jobDir, "pwd.txt"))
	if err != nil || strings.TrimSpace(string(pwd)) != jobDir {
		t.Fatalf("working dir: %q %v, want %s", pwd, err, jobDir)
	}
	var cfg map[string]any
	data, _ := os.ReadFile(filepath.Join(jobDir, "seen-config.json"))
	if json.Unmarshal(data, &cfg) != nil || cfg["model_type"] != "lora" {
		t.Fatalf("config.json: %s", data)
	}
	env, _ := os.ReadFile(filepath.Join(jobDir, "env.txt"))
	for _, want := range []string{"CONFIG_PATH=" + filepath.Join(jobDir, "config.json"), "SIMPLETUNER_CONFIG_BACKEND=json",
		"SIMPLETUNER_JOB_ID=" + id, "SIMPLETUNER_ATTEMPT=1", "SIMPLETUNER_UPLOAD_ENDPOINT=" + o.URL, "SIMPLETUNER_UPLOAD_TOKEN=stu_", "HF_TOKEN=hf_e2e_secret"} {
		if !strings.Contains(string(env), want) {
			t.Errorf("job environment lacks %q", want)
		}
	}
	for _, want := range []string{"\nBAR=z\n", "\nNCCL_DEBUG=INFO\n", "\nPATH="} {
		if !strings.Contains("\n"+string(env), want) {
			t.Errorf("job environment lacks %q", strings.TrimSpace(want))
		}
	}
	for _, banned := range []string{w.Token, o.Admin, "NOTIFY_SOCKET", "WATCHDOG_", "SIMPLETUNER_WORKER_TOKEN", "SIMPLETUNER_ADMIN_TOKEN",
		"SIMPLETUNER_URL", "\nFOO=", "BAR_TOKEN"} {
		if strings.Contains("\n"+string(env), banned) {
			t.Errorf("job environment leaks %.12q", banned)
		}
	}
	// The log reached the orchestrator.
	if !strings.Contains(o.Logs(id), "done") {
		t.Errorf("job log not shipped: %q", o.Logs(id))
	}
	if strings.Contains(w.P.Output(), w.Token) || strings.Contains(o.P.Output(), w.Token) {
		t.Error("a daemon logged the worker token")
	}
}

func TestCancelKillsTheWholeTree(t *testing.T) {
	t.Parallel()
	o := StartOrchestrator(t, "")
	o.StartWorker(WorkerSpec{Name: "stubborn", Persistent: true})
	id := o.Submit(map[string]any{"steps": 600, "step_seconds": 0.1, "ignore_sigterm": true}, nil)
	Eventually(t, 20*time.Second, "trainer and its child running", func() bool { return len(JobProcs(id)) >= 2 })
	if st, m := o.Do("POST", "/api/queue/"+id+"/cancel", nil); st != 200 {
		t.Fatalf("cancel: %d %v", st, m)
	}
	o.WaitJob(id, "cancelled", 20*time.Second)
	Eventually(t, 30*time.Second, "no process of the job left", func() bool { return len(JobProcs(id)) == 0 })
}

func TestWorkerKill9MidJobCompletesElsewhere(t *testing.T) {
	t.Parallel()
	o := StartOrchestrator(t, "")
	a := o.StartWorker(WorkerSpec{Name: "a", Persistent: true, Labels: map[string]string{"pool": "x"}})
	id := o.Submit(slowJob(2), map[string]any{"worker_labels": map[string]string{"pool": "x"}})
	o.WaitTraining(id, 20*time.Second)
	watch := WatchOverlap(id)
	defer watch.Stop()
	a.P.Signal(syscall.SIGKILL)
	b := o.StartWorker(WorkerSpec{Name: "b", Persistent: true, Labels: map[string]string{"pool": "x"}})
	j := o.WaitJob(id, "completed", 30*time.Second)
	at := Attempts(j)
	if len(at) != 2 || at[0]["outcome"] != "worker_lost" || at[1]["worker_id"] != b.ID || j["retries_used"] != float64(1) {
		t.Fatalf("attempts: %v", at)
	}
	watch.Stop()
	if len(watch.Overlap) > 0 {
		t.Fatalf("two attempts ran at once: %v", watch.Overlap)
	}
}

func testRestartMidJob(t *testing.T, dbURL string) {
	// The worker must ride out the restart: its self-fence (7 s, the most
	// workerd keeps below the announced 10 s heartbeat timeout) outlasts it.
	// A restart on a loaded machine took 4.7 s from the last acknowledged
	// heartbeat to the orchestrator being ready again.
	o := StartOrchestratorWith(t, OrchOptions{DBURL: dbURL, HeartbeatTimeout: "10s"})
	o.StartWorker(WorkerSpec{Name: "steady", Persistent: true, SelfFenceAfter: "7s"})
	id := o.Submit(slowJob(4), nil)
	o.WaitJob(id, "running", 20*time.Second)
	o.P.Signal(syscall.SIGTERM)
	if code, ok := o.P.Exited(20 * time.Second); !ok || code != 0 {
		t.Fatalf("orchestrator did not stop cleanly: code %d exited %v", code, ok)
	}
	time.Sleep(500 * time.Millisecond) // the worker notices and retries meanwhile
	o.Restart()
	j := o.WaitJob(id, "completed", 30*time.Second)
	if j["attempt"] != float64(1) || j["retries_used"] != float64(0) {
		t.Fatalf("restart cost a retry: %v", j)
	}
}

func TestOrchestratorRestartMidJobSQLite(t *testing.T) {
	t.Parallel()
	testRestartMidJob(t, "")
}

func TestOrchestratorRestartMidJobPostgres(t *testing.T) {
	t.Parallel()
	testRestartMidJob(t, pgtest.Start(t))
}

func TestShortPartitionNoRequeue(t *testing.T) {
	t.Parallel()
	o := StartOrchestrator(t, "")
	px := NewProxy(t, strings.TrimPrefix(o.URL, "http://"))
	o.StartWorker(WorkerSpec{Name: "flaky", Persistent: true, URL: px.URL()})
	id := o.Submit(slowJob(3), nil)
	o.WaitJob(id, "running", 20*time.Second)
	px.SetCut(true)
	time.Sleep(600 * time.Millisecond) // well under the 3 s heartbeat timeout and 2 s self-fence
	px.SetCut(false)
	j := o.WaitJob(id, "completed", 30*time.Second)
	if j["attempt"] != float64(1) || j["retries_used"] != float64(0) {
		t.Fatalf("short partition caused a requeue: %v", j)
	}
}

func TestLongPartitionSelfFencesNoDoubleRun(t *testing.T) {
	t.Parallel()
	o := StartOrchestrator(t, "")
	px := NewProxy(t, strings.TrimPrefix(o.URL, "http://"))
	a := o.StartWorker(WorkerSpec{Name: "cut-off", Persistent: true, URL: px.URL(), Labels: map[string]string{"pool": "p"}})
	id := o.Submit(slowJob(6), map[string]any{"worker_labels": map[string]string{"pool": "p"}})
	o.WaitTraining(id, 20*time.Second)
	watch := WatchOverlap(id)
	defer watch.Stop()
	px.SetCut(true)
	// The orchestrator gives up on it after 3 s; the worker fences itself after
	// 2 s, well before its 6 s job would have ended.
	o.StartWorker(WorkerSpec{Name: "rescuer", Persistent: true, Labels: map[string]string{"pool": "p"}})
	j := o.WaitJob(id, "completed", 30*time.Second)
	time.Sleep(300 * time.Millisecond)
	px.SetCut(false)
	watch.Stop()
	if len(watch.Overlap) > 0 {
		t.Fatalf("two attempts ran at once: %v", watch.Overlap)
	}
	if !watch.Seen["2"] || j["attempt"] != float64(2) {
		t.Fatalf("job did not move to the second worker: %v", j)
	}
	// The cut-off worker reconnects and is told its attempt is stale; the job stays completed.
	Eventually(t, 30*time.Second, "cut-off worker back", func() bool {
		_, m := o.Do("GET", "/api/admin/workers/"+a.ID, nil)
		return m["connected"] == true
	})
	if got := o.Job(id)["status"]; got != "completed" {
		t.Fatalf("stale worker overwrote the job: %v", got)
	}
}

func TestEphemeralWorkerExitsAfterItsJob(t *testing.T) {
	t.Parallel()
	o := StartOrchestrator(t, "")
	w := o.StartWorker(WorkerSpec{Name: "spot", Persistent: false})
	id := o.Submit(slowJob(0.5), nil)
	o.WaitJob(id, "completed", 20*time.Second)
	if code, ok := w.P.Exited(15 * time.Second); !ok || code != 0 {
		t.Fatalf("ephemeral worker: exited %v code %d\n%s", ok, code, w.P.Output())
	}
	Eventually(t, 30*time.Second, "worker offline", func() bool {
		_, m := o.Do("GET", "/api/admin/workers/"+w.ID, nil)
		return m["status"] == "offline"
	})
}

func TestSIGTERMDrainsThenExits(t *testing.T) {
	t.Parallel()
	o := StartOrchestrator(t, "")
	w := o.StartWorker(WorkerSpec{Name: "drainer", Persistent: true})
	id := o.Submit(slowJob(2), nil)
	o.WaitTraining(id, 20*time.Second)
	w.P.Signal(syscall.SIGTERM)
	next := o.Submit(slowJob(0.2), nil)
	o.WaitJob(id, "completed", 20*time.Second)
	if code, ok := w.P.Exited(15 * time.Second); !ok || code != 0 {
		t.Fatalf("drained worker: exited %v code %d", ok, code)
	}
	if got := o.Job(next)["status"]; got != "queued" {
		t.Fatalf("a draining worker took a new job: %v", got)
	}
}

// The binaries built as releases are (this package's) carry none of the
// fault suite's test hooks: no environment variable can freeze the
// scheduler, crash workerd on a job or shift its clock.
func TestReleaseBinariesHaveNoTestHooks(t *testing.T) {
	t.Parallel()
	for bin, hooks := range map[string][]string{
		"simpletuner-orchestratord": {"SIMPLETUNER_ORCHESTRATORD_TEST_FREEZE", "the scheduler loop is frozen"},
		"simpletuner-workerd":       {"SIMPLETUNER_WORKERD_TEST_CRASH", "SIMPLETUNER_WORKERD_TEST_CLOCK_OFFSET", "workerd crashes on this job"},
	} {
		b, err := os.ReadFile(filepath.Join(BinDir, bin))
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hooks {
			if bytes.Contains(b, []byte(h)) {
				t.Errorf("%s contains the test hook %q", bin, h)
			}
		}
	}
}
