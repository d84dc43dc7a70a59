package faults

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/simpletuner/simpletuner-orchestration/test/e2e/e2etest"
)

// restarter plays systemd's Restart=always for a workerd: whenever its
// process exits, it starts it again, until stop.
type restarter struct {
	w    *Wrk
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	// exits counts the process's exits by exit code.
	exits map[int]int
}

func superviseWorker(w *Wrk) *restarter {
	r := &restarter{w: w, stop: make(chan struct{}), done: make(chan struct{}), exits: map[int]int{}}
	go func() {
		defer close(r.done)
		for {
			code, exited := r.w.P.Exited(50 * time.Millisecond)
			select {
			case <-r.stop:
				return
			default:
			}
			if !exited {
				continue
			}
			r.mu.Lock()
			r.exits[code]++
			r.mu.Unlock()
			r.w.Restart()
		}
	}()
	return r
}

func (r *restarter) Exits(code int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.exits[code]
}

// Stop ends the supervision; the workerd running then stays up.
func (r *restarter) Stop() { close(r.stop); <-r.done }

// A poison job: whatever worker takes it, workerd dies (a test hook makes
// it exit with status 70 on that job), and systemd restarts it. The job must
// end failed once its retries are spent, with a reason that says so, and
// not take the fleet down with it: the other jobs all complete. Run twice:
// workerd dying while the job trains (acknowledged: each loss spends a
// retry) and on receipt (never acknowledged: each loss is a withdrawal).
func TestPoisonJob(t *testing.T) {
	for _, when := range []string{"run", "receive"} {
		t.Run(when, func(t *testing.T) {
			if when == "run" && !isFull() {
				t.Skip("full suite only: make faults (SIMPLETUNER_FAULTS_FULL=1); the receive case stays in the fast subset")
			}
			const marker, retries = "poison-pill", 2
			o := StartOrchestratorWith(t, OrchOptions{Metrics: true})
			h := NewHistory(t, o)
			var sup []*restarter
			for _, name := range []string{"a", "b"} {
				w := o.StartWorker(WorkerSpec{Name: name, Persistent: true, Command: h.WrapperCommand(),
					Env: []string{"SIMPLETUNER_WORKERD_TEST_CRASH=" + when + ":" + marker}})
				w.Spec.NoWait = true // restarts must not wait on the test's goroutine
				sup = append(sup, superviseWorker(w))
			}
			poisonConfig := trainFor(2)
			poisonConfig["note"] = marker
			_, poison := h.Submit(poisonConfig, map[string]any{"max_retries": retries})
			var others []string
			for range 6 {
				_, id := h.Submit(trainFor(0.4), nil)
				others = append(others, id)
			}
			started := time.Now()
			final := o.WaitJob(poison, "failed", 90*time.Second)
			failedAfter := time.Since(started)
			for _, id := range others {
				o.WaitJob(id, "completed", 60*time.Second)
			}
			crashes := 0
			for _, s := range sup {
				s.Stop()
				crashes += s.Exits(70)
			}
			h.WaitAllTerminal(30 * time.Second)
			h.Finish()
			sum := h.Check(Expect{MaxRequeues: -1})
			reason, _ := final["error_message"].(string)
			if !strings.Contains(reason, fmt.Sprintf("%d used", retries)) && !strings.Contains(reason, fmt.Sprintf("%d retries", retries)) {
				t.Errorf("the poison job failed with %q, want a reason naming its %d retries", reason, retries)
			}
			if final["retries_used"] != float64(retries) {
				t.Errorf("poison retries_used %v, want %d", final["retries_used"], retries)
			}
			if n := len(Attempts(final)); crashes < retries+1 || n > 3*(retries+1)+1 {
				t.Errorf("%d workerd crashes for %d attempts", crashes, n)
			}
			t.Logf("RESULT %s: poison job failed %s after its submit, %d attempts, %d workerd crashes, reason %q; the other %d jobs completed; %s",
				t.Name(), failedAfter.Round(time.Millisecond), len(Attempts(final)), crashes, reason, len(others), sum)
		})
	}
}
