package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/pgtest"
)

// slowJob trains for about seconds in 0.1 s steps.
func slowJob(seconds float64) map[string]any {
	return map[string]any{"steps": int(seconds * 10), "step_seconds": 0.1}
}

func attempts(j map[string]any) []map[string]any {
	var out []map[string]any
	for _, a := range j["attempts"].([]any) {
		out = append(out, a.(map[string]any))
	}
	return out
}

func TestJobSeesItsFilesAndEnvironment(t *testing.T) {
	t.Parallel()
	o := startOrchestrator(t, "")
	script := `env > env.txt; cp "$CONFIG_PATH" seen-config.json; pwd > pwd.txt; echo done`
	w := o.startWorker(workerSpec{name: "env", persistent: true, command: []string{"/bin/sh", "-c", script}})
	id := o.submit(map[string]any{"model_type": "lora", "learning_rate": 0.0001}, map[string]any{"hf_token": "hf_e2e_secret"})
	o.waitJob(id, "completed", 20*time.Second)

	jobDir := filepath.Join(w.dir, "state", "jobs", id)
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
		"SIMPLETUNER_JOB_ID=" + id, "SIMPLETUNER_ATTEMPT=1", "SIMPLETUNER_UPLOAD_ENDPOINT=" + o.url, "SIMPLETUNER_UPLOAD_TOKEN=stu_", "HF_TOKEN=hf_e2e_secret"} {
		if !strings.Contains(string(env), want) {
			t.Errorf("job environment lacks %q", want)
		}
	}
	for _, banned := range []string{w.token, "NOTIFY_SOCKET", "WATCHDOG_", "SIMPLETUNER_WORKER_TOKEN"} {
		if strings.Contains(string(env), banned) {
			t.Errorf("job environment leaks %.12q", banned)
		}
	}
	// The log reached the orchestrator.
	if !strings.Contains(o.logs(id), "done") {
		t.Errorf("job log not shipped: %q", o.logs(id))
	}
	if strings.Contains(w.p.output(), w.token) || strings.Contains(o.p.output(), w.token) {
		t.Error("a daemon logged the worker token")
	}
}

func (o *orch) logs(id string) string {
	o.t.Helper()
	out, _ := httpGet(o.url+"/api/queue/"+id+"/logs", o.admin)
	return out
}

func TestCancelKillsTheWholeTree(t *testing.T) {
	t.Parallel()
	o := startOrchestrator(t, "")
	o.startWorker(workerSpec{name: "stubborn", persistent: true})
	id := o.submit(map[string]any{"steps": 600, "step_seconds": 0.1, "ignore_sigterm": true}, nil)
	eventually(t, 20*time.Second, "trainer and its child running", func() bool { return len(jobProcs(id)) >= 2 })
	if st, m := o.do("POST", "/api/queue/"+id+"/cancel", nil); st != 200 {
		t.Fatalf("cancel: %d %v", st, m)
	}
	o.waitJob(id, "cancelled", 20*time.Second)
	eventually(t, 10*time.Second, "no process of the job left", func() bool { return len(jobProcs(id)) == 0 })
}

func TestWorkerKill9MidJobCompletesElsewhere(t *testing.T) {
	t.Parallel()
	o := startOrchestrator(t, "")
	a := o.startWorker(workerSpec{name: "a", persistent: true, labels: map[string]string{"pool": "x"}})
	id := o.submit(slowJob(2), map[string]any{"worker_labels": map[string]string{"pool": "x"}})
	eventually(t, 20*time.Second, "job running on a", func() bool { return len(jobProcs(id)) > 0 })
	watch := watchOverlap(id)
	defer watch.stop()
	a.p.signal(syscall.SIGKILL)
	b := o.startWorker(workerSpec{name: "b", persistent: true, labels: map[string]string{"pool": "x"}})
	j := o.waitJob(id, "completed", 30*time.Second)
	at := attempts(j)
	if len(at) != 2 || at[0]["outcome"] != "worker_lost" || at[1]["worker_id"] != b.id || j["retries_used"] != float64(1) {
		t.Fatalf("attempts: %v", at)
	}
	watch.stop()
	if len(watch.overlap) > 0 {
		t.Fatalf("two attempts ran at once: %v", watch.overlap)
	}
}

func testRestartMidJob(t *testing.T, dbURL string) {
	o := startOrchestrator(t, dbURL)
	o.startWorker(workerSpec{name: "steady", persistent: true})
	id := o.submit(slowJob(4), nil)
	o.waitJob(id, "running", 20*time.Second)
	o.p.signal(syscall.SIGTERM)
	if code, ok := o.p.exited(20 * time.Second); !ok || code != 0 {
		t.Fatalf("orchestrator did not stop cleanly: code %d exited %v", code, ok)
	}
	time.Sleep(500 * time.Millisecond) // the worker notices and retries meanwhile
	o.restart()
	j := o.waitJob(id, "completed", 30*time.Second)
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
	o := startOrchestrator(t, "")
	px := newProxy(t, strings.TrimPrefix(o.url, "http://"))
	o.startWorker(workerSpec{name: "flaky", persistent: true, url: px.url()})
	id := o.submit(slowJob(3), nil)
	o.waitJob(id, "running", 20*time.Second)
	px.setCut(true)
	time.Sleep(600 * time.Millisecond) // well under the 1.5 s heartbeat timeout and 1 s self-fence
	px.setCut(false)
	j := o.waitJob(id, "completed", 30*time.Second)
	if j["attempt"] != float64(1) || j["retries_used"] != float64(0) {
		t.Fatalf("short partition caused a requeue: %v", j)
	}
}

func TestLongPartitionSelfFencesNoDoubleRun(t *testing.T) {
	t.Parallel()
	o := startOrchestrator(t, "")
	px := newProxy(t, strings.TrimPrefix(o.url, "http://"))
	a := o.startWorker(workerSpec{name: "cut-off", persistent: true, url: px.url(), labels: map[string]string{"pool": "p"}})
	id := o.submit(slowJob(3), map[string]any{"worker_labels": map[string]string{"pool": "p"}})
	eventually(t, 20*time.Second, "job running", func() bool { return len(jobProcs(id)) > 0 })
	watch := watchOverlap(id)
	defer watch.stop()
	px.setCut(true)
	// The orchestrator gives up on it after 1.5 s; the worker fences itself after 1 s.
	o.startWorker(workerSpec{name: "rescuer", persistent: true, labels: map[string]string{"pool": "p"}})
	j := o.waitJob(id, "completed", 30*time.Second)
	time.Sleep(300 * time.Millisecond)
	px.setCut(false)
	watch.stop()
	if len(watch.overlap) > 0 {
		t.Fatalf("two attempts ran at once: %v", watch.overlap)
	}
	if !watch.seen["2"] || j["attempt"] != float64(2) {
		t.Fatalf("job did not move to the second worker: %v", j)
	}
	// The cut-off worker reconnects and is told its attempt is stale; the job stays completed.
	eventually(t, 10*time.Second, "cut-off worker back", func() bool {
		_, m := o.do("GET", "/api/admin/workers/"+a.id, nil)
		return m["connected"] == true
	})
	if got := o.job(id)["status"]; got != "completed" {
		t.Fatalf("stale worker overwrote the job: %v", got)
	}
}

func TestEphemeralWorkerExitsAfterItsJob(t *testing.T) {
	t.Parallel()
	o := startOrchestrator(t, "")
	w := o.startWorker(workerSpec{name: "spot", persistent: false})
	id := o.submit(slowJob(0.5), nil)
	o.waitJob(id, "completed", 20*time.Second)
	if code, ok := w.p.exited(15 * time.Second); !ok || code != 0 {
		t.Fatalf("ephemeral worker: exited %v code %d\n%s", ok, code, w.p.output())
	}
	eventually(t, 5*time.Second, "worker offline", func() bool {
		_, m := o.do("GET", "/api/admin/workers/"+w.id, nil)
		return m["status"] == "offline"
	})
}

func TestSIGTERMDrainsThenExits(t *testing.T) {
	t.Parallel()
	o := startOrchestrator(t, "")
	w := o.startWorker(workerSpec{name: "drainer", persistent: true})
	id := o.submit(slowJob(2), nil)
	eventually(t, 20*time.Second, "job running", func() bool { return len(jobProcs(id)) > 0 })
	w.p.signal(syscall.SIGTERM)
	next := o.submit(slowJob(0.2), nil)
	o.waitJob(id, "completed", 20*time.Second)
	if code, ok := w.p.exited(15 * time.Second); !ok || code != 0 {
		t.Fatalf("drained worker: exited %v code %d", ok, code)
	}
	if got := o.job(next)["status"]; got != "queued" {
		t.Fatalf("a draining worker took a new job: %v", got)
	}
}
