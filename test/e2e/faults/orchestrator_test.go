package faults

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/pgtest"
	. "github.com/simpletuner/simpletuner-orchestration/test/e2e/e2etest"
)

// kill -9 the orchestrator at random moments while jobs flow. The windows
// between claim and dispatch and between dispatch and ack cannot be hit on
// purpose from outside; the history tells afterwards where each kill landed:
// an attempt dispatched before a kill and acknowledged after it (or never,
// ending "withdrawn") was caught in one of them.
func testOrchestratorKill9Loop(t *testing.T, dbURL string, kills, jobs int) {
	// The workers ride out the orchestrator's absence: self-fence 20 s, which
	// workerd keeps only below the heartbeat timeout the orchestrator announces.
	o := StartOrchestratorWith(t, OrchOptions{Metrics: true, DBURL: dbURL, HeartbeatTimeout: "30s"})
	h := NewHistory(t, o)
	for i := range 3 {
		o.StartWorker(WorkerSpec{Name: fmt.Sprintf("w%d", i), Persistent: true, SelfFenceAfter: "20s", Command: h.ExecWrapperCommand()})
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Add(1)
	go func() { // the load: a job every 100 ms while the orchestrator answers
		defer wg.Done()
		for i := 0; i < jobs; {
			select {
			case <-done:
				return
			default:
			}
			if st, _ := h.Submit(trainFor(0.2+rand.Float64()*0.4), nil); st == 201 {
				i++
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	var killedAt []time.Time
	for k := range kills {
		time.Sleep(time.Duration(300+rand.IntN(900)) * time.Millisecond)
		h.Fault("kill -9 orchestrator (%d of %d)", k+1, kills)
		killedAt = append(killedAt, time.Now())
		o.P.Kill9()
		time.Sleep(time.Duration(100+rand.IntN(400)) * time.Millisecond)
		o.Restart()
	}
	wg.Wait()
	close(done)
	h.WaitAllTerminal(120 * time.Second)
	h.Finish()
	sum := h.Check(Expect{MaxRequeues: -1, Statuses: []string{"completed"}})
	// Where did the kills land?
	inWindow, withdrawn := 0, 0
	for _, j := range h.Final {
		for _, a := range Attempts(j) {
			d, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(a["dispatched_at"]))
			s, acked := time.Parse(time.RFC3339Nano, fmt.Sprint(a["started_at"]))
			if a["outcome"] == "withdrawn" {
				withdrawn++
			}
			for _, k := range killedAt {
				if d.Before(k) && (acked != nil || s.After(k)) {
					inWindow++
					t.Logf("kill at %s landed after the claim of %s attempt %v (dispatched %s) and before its ack (%v); outcome %v",
						k.Format("15:04:05.000"), j["job_id"], a["attempt"], d.Format("15:04:05.000"), a["started_at"], a["outcome"])
				}
			}
		}
	}
	t.Logf("RESULT %s: %d kills; %s; %d attempts caught between claim and ack by a kill, %d withdrawn",
		t.Name(), kills, sum, inWindow, withdrawn)
}

func TestOrchestratorKill9LoopSQLite(t *testing.T) {
	if isFull() {
		testOrchestratorKill9Loop(t, "", 15, 80)
		return
	}
	testOrchestratorKill9Loop(t, "", 3, 12)
}

func TestOrchestratorKill9LoopPostgres(t *testing.T) {
	fullOnly(t)
	testOrchestratorKill9Loop(t, pgtest.Start(t), 15, 80)
}

// Graceful restarts (SIGTERM, wait, start) under load: nothing is requeued,
// not even withdrawn.
func TestOrchestratorGracefulRestartUnderLoad(t *testing.T) {
	fullOnly(t)
	for _, store := range []string{"sqlite", "postgres"} {
		t.Run(store, func(t *testing.T) {
			url := ""
			if store == "postgres" {
				url = pgtest.Start(t)
			}
			o := StartOrchestratorWith(t, OrchOptions{Metrics: true, DBURL: url, HeartbeatTimeout: "30s"})
			h := NewHistory(t, o)
			for i := range 3 {
				o.StartWorker(WorkerSpec{Name: fmt.Sprintf("w%d", i), Persistent: true, SelfFenceAfter: "20s", Command: h.ExecWrapperCommand()})
			}
			for range 30 {
				h.Submit(trainFor(0.3+rand.Float64()*0.7), nil)
			}
			for k := range 4 {
				time.Sleep(time.Duration(500+rand.IntN(700)) * time.Millisecond)
				h.Fault("SIGTERM orchestrator (%d of 4)", k+1)
				o.P.Signal(syscall.SIGTERM)
				if code, ok := o.P.Exited(25 * time.Second); !ok || code != 0 {
					t.Fatalf("orchestrator did not stop cleanly: code %d exited %v", code, ok)
				}
				o.Restart()
				h.Submit(trainFor(0.3), nil)
			}
			h.WaitAllTerminal(120 * time.Second)
			h.Finish()
			sum := h.Check(Expect{MaxRequeues: 0, Statuses: []string{"completed"}})
			t.Logf("RESULT %s: 4 graceful restarts; %s", t.Name(), sum)
		})
	}
}
