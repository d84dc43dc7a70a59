package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/simpletuner/simpletuner-orchestration/test/e2e/e2etest"
)

// Rotating the token of a busy worker with simpletunerctl, which rewrites
// the worker's token file: the orchestrator refuses the old token and closes
// the stream, workerd reads the new token from the file, registers again with
// its job, and the job finishes on its first attempt. workerd keeps running.
func TestRotatingABusyWorkersTokenKeepsItsJob(t *testing.T) {
	t.Parallel()
	o := StartOrchestratorWith(t, OrchOptions{HeartbeatTimeout: "10s"})
	w := o.StartWorker(WorkerSpec{Name: "rotated", Persistent: true, SelfFenceAfter: "5s"})
	id := o.Submit(slowJob(4), nil)
	o.WaitTraining(id, 20*time.Second)

	tokenFile := filepath.Join(w.Dir, "token")
	ctl := exec.Command(filepath.Join(BinDir, "simpletunerctl"), "worker", "rotate", w.ID, "--credential", tokenFile, "--force")
	ctl.Env = []string{"HOME=" + t.TempDir(), "SIMPLETUNER_URL=" + o.URL, "SIMPLETUNER_ADMIN_TOKEN=" + o.Admin}
	out, err := ctl.CombinedOutput()
	if err != nil {
		t.Fatalf("simpletunerctl worker rotate: %v\n%s", err, out)
	}
	b, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	newToken := strings.TrimSpace(string(b))
	if newToken == w.Token || !strings.HasPrefix(newToken, "wt_") {
		t.Fatalf("the token file was not rewritten with a new token")
	}
	NoteSecret("rotated worker token", newToken)

	j := o.WaitJob(id, "completed", 30*time.Second)
	if j["attempt"] != float64(1) || j["retries_used"] != float64(0) {
		t.Fatalf("the rotation cost the job an attempt: %v", j)
	}
	if _, exited := w.P.Exited(0); exited {
		t.Fatalf("workerd exited after the rotation:\n%s", w.P.Output())
	}
	if !strings.Contains(w.P.Output(), "using the new worker token") {
		t.Errorf("workerd did not say it took the new token")
	}
	// The worker goes on taking jobs with the new token.
	next := o.Submit(slowJob(0.2), nil)
	o.WaitJob(next, "completed", 20*time.Second)
}
