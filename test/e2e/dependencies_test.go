package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/webhook/spec"
	. "github.com/simpletuner/simpletuner-orchestration/test/e2e/e2etest"
)

func dependsOn(id, when string) map[string]any {
	return map[string]any{"depends_on": []map[string]any{{"job_id": id, "when": when}}}
}

// endedBefore fails the test unless job first ended before job then started.
func endedBefore(t *testing.T, o *Orch, first, then string) {
	t.Helper()
	a, b := o.Job(first), o.Job(then)
	end, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(a["completed_at"]))
	start, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(b["started_at"]))
	if end.IsZero() || start.IsZero() || start.Before(end) {
		t.Fatalf("%s started at %v, before %s ended at %v", then, b["started_at"], first, a["completed_at"])
	}
}

// Real binaries, on SQLite and PostgreSQL: a chain of three, a job that
// runs only after another failed and one that can then never run all wait
// across a kill -9 and restart of the orchestrator, then each moves as its
// dependency ends; the webhook subscriber hears job.released, and the
// audit chain holds.
func TestDependenciesEndToEnd(t *testing.T) {
	t.Parallel()
	for _, engine := range []string{"sqlite", "postgres"} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			opt := OrchOptions{ExtraTOML: WebhookTOML}
			if engine == "postgres" {
				opt.DBURL = StartPG(t).URL
			}
			o := StartOrchestratorWith(t, opt)
			rc := StartReceiver(t, "")
			o.Subscribe(rc, "all", "job.*")
			quick := map[string]any{"steps": 2, "step_seconds": 0.05}
			a := o.Submit(quick, nil)
			b := o.Submit(quick, dependsOn(a, "ok"))
			c := o.Submit(quick, dependsOn(b, "ok"))
			f := o.Submit(map[string]any{"steps": 1, "exit_code": 3}, nil)
			afterFailure := o.Submit(quick, dependsOn(f, "failed"))
			never := o.Submit(quick, dependsOn(f, "ok"))
			waiting := []string{b, c, afterFailure, never}

			// Everything is in the database: a restart loses nothing.
			o.P.Kill9()
			o.Restart()
			for _, id := range waiting {
				if j := o.Job(id); j["status"] != "waiting" || j["waiting_reason"] != "dependency" {
					t.Fatalf("after the restart %s is %v (%v)", id, j["status"], j["waiting_reason"])
				}
			}

			o.StartWorker(WorkerSpec{Name: "solo", Persistent: true})
			o.WaitJob(c, "completed", 90*time.Second)
			o.WaitJob(afterFailure, "completed", 60*time.Second)
			j := o.WaitJob(never, "cancelled", 30*time.Second)
			if want := "dependency " + f + " ended failed; this job needed it to complete"; j["error_message"] != want {
				t.Fatalf("the job that could never run: %v, want %q", j["error_message"], want)
			}
			endedBefore(t, o, a, b)
			endedBefore(t, o, b, c)
			endedBefore(t, o, f, afterFailure)

			want := map[string][]string{
				b:     {spec.JobQueued, spec.JobReleased, spec.JobStarted, spec.JobCompleted},
				never: {spec.JobQueued, spec.JobCancelled},
			}
			Eventually(t, 60*time.Second, "the events of the dependents delivered", func() bool {
				byJob := ByJob(uniqueEvents(rc.Accepted()))
				return len(byJob[b]) >= 4 && len(byJob[never]) >= 2
			})
			byJob := ByJob(uniqueEvents(rc.Accepted()))
			for id, events := range want {
				if !slices.Equal(byJob[id], events) {
					t.Errorf("events of %s: %v, want %v", id, byJob[id], events)
				}
			}
			if st, v := o.Do("GET", "/api/admin/audit/verify", nil); st != 200 || v["ok"] != true {
				t.Fatalf("audit verify: %d %v", st, v)
			}
		})
	}
}

// workedExample is the shell block of the worked example in
// docs/dependencies.md.
func workedExample(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../docs/dependencies.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n## Worked example")
	if !ok {
		t.Fatal("docs/dependencies.md has no worked example")
	}
	_, code, ok := strings.Cut(sec, "```sh\n")
	code, _, closed := strings.Cut(code, "\n```")
	if !ok || !closed {
		t.Fatal("the worked example has no ```sh block")
	}
	return code + "\n"
}

// The worked example of docs/dependencies.md, run as printed by bash: four
// trainings and an evaluation that starts only once all four completed.
func TestDependenciesWorkedExample(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("jq"); err != nil {
		t.Skip("the worked example uses jq, which this machine lacks")
	}
	o := StartOrchestrator(t, "")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "run.json"), []byte(`{"model_type": "lora", "learning_rate": 0.0001, "steps": 2, "step_seconds": 0.05}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(o.ConfigsDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(o.ConfigsDir(), "evaluate.json"), []byte(`{"steps": 1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	o.StartWorker(WorkerSpec{Name: "solo", Persistent: true})

	cmd := exec.Command("bash", "-e", "-o", "pipefail", "-c", workedExample(t))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+BinDir+":"+os.Getenv("PATH"), "NO_COLOR=1",
		"SIMPLETUNER_URL="+o.URL, "SIMPLETUNER_ADMIN_TOKEN="+o.Admin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the worked example: %v\n%s", err, out)
	}
	ids, err := os.ReadFile(filepath.Join(dir, "sweep.ids"))
	if err != nil {
		t.Fatal(err)
	}
	sweep := strings.Fields(string(ids))
	if len(sweep) != 4 {
		t.Fatalf("sweep.ids holds %q, want four job ids", ids)
	}
	var eval string
	for _, line := range strings.Split(string(out), "\n") {
		if id, ok := strings.CutPrefix(strings.TrimSpace(line), "Job:"); ok && eval == "" {
			eval = strings.TrimSpace(id)
		}
	}
	if !strings.HasPrefix(eval, "j_") {
		t.Fatalf("simpletunerctl job printed no job id:\n%s", out)
	}
	o.WaitJob(eval, "completed", 120*time.Second)
	for _, id := range sweep {
		if lr := o.Job(id)["config"].(map[string]any)["learning_rate"]; lr == 0.0001 && id != sweep[0] {
			t.Errorf("training %s kept the template's learning rate", id)
		}
		endedBefore(t, o, id, eval)
	}
	deps, _ := o.Job(eval)["depends_on"].([]any)
	if len(deps) != 4 {
		t.Fatalf("the evaluation depends on %v", deps)
	}
}
