package integration

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
	"github.com/simpletuner/simpletuner-orchestration/internal/worker"
)

// The worker's configured self-fence limit (30 s) is longer than the
// orchestrator's heartbeat timeout (3 s). The worker must fence itself by the
// orchestrator's timeout, not by its own file: cut off, it stops the trainer
// before the orchestrator declares it lost and requeues the job. The timeout
// is seconds, as the margin (a quarter of it) is what the order rests on: on
// a loaded machine, a timeout of one second let a stall of heartbeats alone
// lose the worker before the cut.
func TestSelfFenceFollowsTheOrchestratorsTimeout(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func(*testing.T) store.Store) {
		opt := fastOptions(t)
		opt.HeartbeatInterval = 100 * time.Millisecond
		opt.HeartbeatTimeout = 3 * time.Second
		o := startOrch(t, open(t), opt, "")
		id, token := o.createWorker("w")
		gate := newReportGate(t, o.URL)
		w := startWorker(t, gate.http.URL, token, func(wo *worker.Options) { wo.SelfFenceAfter = 30 * time.Second })
		o.connected(id)
		if !strings.Contains(w.logs.String(), "using a shorter limit") || !strings.Contains(w.logs.String(), `effective=2.25s`) {
			t.Fatalf("the worker did not log its effective self-fence limit of 2.25s")
		}

		jobID := o.submit(map[string]any{"steps": 200, "step_seconds": 0.05})
		pid := 0
		testutil.Eventually(t, 30*time.Second, "the trainer running", func() bool {
			b, err := os.ReadFile(filepath.Join(w.stateDir, "jobs", jobID, "pids.txt"))
			if err != nil {
				return false
			}
			pid, _ = strconv.Atoi(strings.Fields(string(b))[0])
			return pid > 0 && o.job(jobID)["status"] == "running"
		})

		gate.set("cut")
		cut := time.Now()
		var dead, lost time.Duration
		testutil.Eventually(t, 30*time.Second, "the trainer stopped and the job requeued", func() bool {
			if dead == 0 && !testutil.Running(pid) { // a zombie trains no more
				dead = time.Since(cut)
			}
			if at := attempts(o.job(jobID)); lost == 0 && len(at) > 0 && at[0]["outcome"] == "worker_lost" {
				lost = time.Since(cut)
			}
			return dead > 0 && lost > 0
		})
		gate.release()
		t.Logf("after the cut: trainer gone at %s, job requeued at %s", dead.Round(time.Millisecond), lost.Round(time.Millisecond))
		if dead >= lost {
			t.Fatalf("the trainer ran until %s, after the orchestrator gave the job up at %s", dead, lost)
		}
	})
}
