package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/simpletuner/simpletuner-orchestration/test/e2e/e2etest"
)

// An admin created the worker persistent; its file does not say. The worker
// takes the admin's type from the registration reply, logs it, and stays
// after its job instead of leaving as an ephemeral worker would.
func TestWorkerAdoptsTheAdminsType(t *testing.T) {
	t.Parallel()
	o := StartOrchestrator(t, "")
	w := o.StartWorker(WorkerSpec{Name: "adopt", Persistent: true, NoPersistentKey: true})
	if !strings.Contains(w.P.Output(), "taking the worker type an admin gave this worker") {
		t.Fatalf("the worker did not log adopting the admin's type")
	}
	if strings.Contains(o.P.Output(), "sets another type than an admin gave it") {
		t.Fatalf("the orchestrator warned of a type the worker's configuration does not set")
	}
	id := o.Submit(slowJob(0.2), nil)
	o.WaitJob(id, "completed", 20*time.Second)
	time.Sleep(time.Second) // an ephemeral worker would leave about now
	if _, exited := w.P.Exited(0); exited {
		t.Fatalf("the worker left after its job; it should have become persistent")
	}
	if wk := o.Worker(w.ID); wk["status"] != "idle" || wk["worker_type"] != "persistent" {
		t.Fatalf("worker after the job: %v", wk)
	}
}

// The worker's file sets ephemeral while the admin created it persistent: the
// worker keeps its own, and both sides say so.
func TestWorkerTypeMismatchIsLoggedOnBothSides(t *testing.T) {
	t.Parallel()
	o := StartOrchestrator(t, "")
	id, token := o.CreateWorker("mismatch", true, nil)
	w := o.StartWorkerFor(id, token, WorkerSpec{Name: "mismatch", Persistent: false})
	Eventually(t, 30*time.Second, "both sides log the mismatch", func() bool {
		return strings.Contains(w.P.Output(), "keeping the one this worker's configuration sets") &&
			strings.Contains(o.P.Output(), "sets another type than an admin gave it")
	})
}

// [job] cancel_grace in the worker's file wins over the orchestrator's for
// jobs on that worker: a trainer that ignores SIGTERM is killed after the
// worker's 200 ms, not the orchestrator's 1 s; the worker list shows it.
func TestWorkersOwnCancelGraceWins(t *testing.T) {
	t.Parallel()
	o := StartOrchestrator(t, "")
	w := o.StartWorker(WorkerSpec{Name: "quick", Persistent: true, CancelGrace: "200ms"})
	if caps := o.Worker(w.ID)["capabilities"].(map[string]any); caps["cancel_grace_seconds"] != 0.2 {
		t.Fatalf("capabilities %v, want cancel_grace_seconds 0.2", caps)
	}
	id := o.Submit(map[string]any{"steps": 300, "step_seconds": 0.1, "ignore_sigterm": true}, nil)
	Eventually(t, 20*time.Second, "trainer and child running", func() bool { return len(JobProcs(id)) >= 2 })
	began := time.Now()
	if code, _ := o.Do("POST", "/api/queue/"+id+"/cancel", nil); code != 200 {
		t.Fatalf("cancel: %d", code)
	}
	Eventually(t, 30*time.Second, "the tree gone", func() bool { return len(JobProcs(id)) == 0 })
	took := time.Since(began)
	o.WaitJob(id, "cancelled", 10*time.Second)
	if took > 900*time.Millisecond {
		t.Fatalf("the tree took %s to die; the worker's grace is 200ms", took)
	}
	if !strings.Contains(w.P.Output(), `"grace":"200ms"`) {
		t.Errorf("the worker did not log a 200ms grace")
	}
}

// A URL that is not an orchestrator's (a path too many) is a configuration
// error: one clear message naming the fix, exit status 1, no retry loop.
func TestWrongURLFailsFast(t *testing.T) {
	t.Parallel()
	o := StartOrchestrator(t, "")
	w := o.StartWorker(WorkerSpec{Name: "lost", Persistent: true, URLPath: "/api", NoWait: true})
	code, exited := w.P.Exited(20 * time.Second)
	if !exited || code != 1 {
		t.Fatalf("workerd with a wrong URL: exited %v with %d, want exit 1", exited, code)
	}
	out := w.P.Output()
	if !strings.Contains(out, `remove the path \"/api\" from [orchestrator] url`) && !strings.Contains(out, `remove the path "/api" from [orchestrator] url`) {
		t.Fatalf("no hint about the path in the output:\n%s", out)
	}
	// Counted as "HTTP 404": a bare "404" also turns up in timestamps,
	// ports and tokens.
	if n := strings.Count(out, "HTTP 404"); n > 3 {
		t.Fatalf("the 404 was reported %d times", n)
	}
}

// SIGHUP applies job settings to the next job and the log level at once;
// keys that need a restart are reported; an invalid file keeps the old
// configuration.
func TestWorkerReload(t *testing.T) {
	t.Parallel()
	o := StartOrchestrator(t, "")
	script := `echo "marker=$MARKER"; exec ` + DemoTrainer()
	w := o.StartWorker(WorkerSpec{Name: "reload", Persistent: true, Command: []string{"/bin/sh", "-c", script},
		JobTOML: "env = { MARKER = \"one\" }\n"})
	first := o.Submit(slowJob(0.1), nil)
	o.WaitJob(first, "completed", 20*time.Second)

	conf, err := os.ReadFile(w.Conf)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(conf), `MARKER = "one"`, `MARKER = "two"`, 1)
	edited = strings.Replace(edited, `name = "reload"`, `name = "renamed"`, 1)
	edited = strings.Replace(edited, `level = "debug"`, `level = "info"`, 1)
	if err := os.WriteFile(w.Conf, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	w.P.Signal(syscall.SIGHUP)
	Eventually(t, 30*time.Second, "the reload logged", func() bool { return strings.Contains(w.P.Output(), "configuration reloaded") })
	if !strings.Contains(w.P.Output(), `"key":"worker.name"`) {
		t.Errorf("the renamed worker was not reported as needing a restart")
	}
	second := o.Submit(slowJob(0.1), nil)
	o.WaitJob(second, "completed", 20*time.Second)
	if !strings.Contains(o.Logs(first), "marker=one") || !strings.Contains(o.Logs(second), "marker=two") {
		t.Fatalf("job logs: first %q, second %q", o.Logs(first), o.Logs(second))
	}

	if err := os.WriteFile(w.Conf, []byte(edited+"\n[job]\nbogus = 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	w.P.Signal(syscall.SIGHUP)
	Eventually(t, 30*time.Second, "the failed reload logged", func() bool {
		return strings.Contains(w.P.Output(), "reload failed; keeping the previous configuration")
	})
	third := o.Submit(slowJob(0.1), nil)
	o.WaitJob(third, "completed", 20*time.Second)
	if !strings.Contains(o.Logs(third), "marker=two") {
		t.Fatalf("after a failed reload the job saw %q", o.Logs(third))
	}
}

// A second orchestratord started on the first one's embedded database
// exits with status 1 naming the lock, and never answers /readyz.
func TestSecondOrchestratorOnOneSQLiteDatabase(t *testing.T) {
	t.Parallel()
	o := StartOrchestrator(t, "")
	conf, err := os.ReadFile(o.Conf)
	if err != nil {
		t.Fatal(err)
	}
	port := FreePort(t)
	second := regexp.MustCompile(`listen = \["127\.0\.0\.1:\d+"\]`).ReplaceAllString(string(conf), fmt.Sprintf(`listen = ["127.0.0.1:%d"]`, port))
	second = strings.Replace(second, o.AdminSocket(), filepath.Join(o.Dir, "second.sock"), 1)
	path := filepath.Join(o.Dir, "second.toml")
	if err := os.WriteFile(path, []byte(second), 0o600); err != nil {
		t.Fatal(err)
	}
	p := Start(t, "simpletuner-orchestratord", "--config", path)
	code, exited := p.Exited(20 * time.Second)
	if !exited || code != 1 {
		t.Fatalf("the second orchestratord: exited %v with %d, want 1", exited, code)
	}
	if !strings.Contains(p.Output(), "in use by another simpletuner-orchestratord") || !strings.Contains(p.Output(), "orchestrator.db.lock") {
		t.Errorf("no clear refusal:\n%s", p.Output())
	}
	if o.Ready() != 200 {
		t.Error("the first orchestrator is not ready any more")
	}
}
