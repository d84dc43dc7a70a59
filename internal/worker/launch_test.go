package worker

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// A first attempt's dispatch is acknowledged once its trainer was forked:
// the report and the orchestrator's answer do not take the CPU the launch
// needs.
func TestFirstAttemptAcknowledgedAfterFork(t *testing.T) {
	t.Parallel()
	f := newFakeOrch(t)
	var workDir string
	forked := make(chan bool, 1)
	f.onStatus = func(jobID string, rep protocol.StatusReport) {
		if rep.Status == protocol.ReportStarting {
			forked <- processWorksIn(filepath.Join(workDir, jobID))
		}
	}
	startWorker(t, f, func(o *Options) {
		o.Command = []string{"/bin/sleep", "1"}
		workDir = filepath.Join(o.StateDir, "jobs") // where WorkDir "" puts the jobs
	})
	f.connected(1)
	f.submit(protocol.JobSubmitEvent{JobID: "j_ack000000001", Attempt: 1, Config: json.RawMessage(`{}`)})
	if !<-forked {
		t.Error("the dispatch was acknowledged before the trainer was forked")
	}
	f.report("j_ack000000001", "completed")
}

// processWorksIn reports whether a process has dir as its working directory.
func processWorksIn(dir string) bool {
	cwds, _ := filepath.Glob("/proc/[0-9]*/cwd")
	for _, c := range cwds {
		if d, err := os.Readlink(c); err == nil && d == dir {
			return true
		}
	}
	return false
}
