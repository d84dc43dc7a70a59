package faults

import (
	"fmt"
	"sync"
	"testing"
	"time"

	. "github.com/simpletuner/simpletuner-orchestration/test/e2e/e2etest"
)

// Restart PostgreSQL under load: while it is down the orchestrator answers
// 503 (readyz and submits), never a 500; no accepted job is lost; dispatch
// resumes once it is back.
func TestPostgresRestartUnderLoad(t *testing.T) {
	fullOnly(t)
	pg := StartPG(t)
	o := StartOrchestratorWith(t, OrchOptions{Metrics: true, DBURL: pg.URL, HeartbeatTimeout: "5s", StartupGrace: "5s"})
	h := NewHistory(t, o)
	for i := range 2 {
		o.StartWorker(WorkerSpec{Name: fmt.Sprintf("w%d", i), Persistent: true, SelfFenceAfter: "30s", Command: h.ExecWrapperCommand()})
	}
	var mu sync.Mutex
	codes := map[string]map[int]int{} // phase → status → count
	phase := "before"
	note := func(st int) {
		mu.Lock()
		defer mu.Unlock()
		if codes[phase] == nil {
			codes[phase] = map[int]int{}
		}
		codes[phase][st]++
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			st, _ := h.Submit(trainFor(0.5), nil)
			note(st)
		}
	}()
	time.Sleep(2 * time.Second)
	h.Fault("stop PostgreSQL")
	mu.Lock()
	phase = "down"
	mu.Unlock()
	pg.Stop()
	Eventually(t, 10*time.Second, "readyz 503 while the database is down", func() bool { return o.Ready() == 503 })
	time.Sleep(3 * time.Second)
	h.Fault("start PostgreSQL")
	if err := pg.Start(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	phase = "after"
	mu.Unlock()
	Eventually(t, 20*time.Second, "readyz 200 again", func() bool { return o.Ready() == 200 })
	time.Sleep(3 * time.Second)
	close(stop)
	wg.Wait()
	h.WaitAllTerminal(60 * time.Second)
	h.Finish()
	sum := h.Check(Expect{MaxRequeues: -1, Statuses: []string{"completed"}})
	mu.Lock()
	defer mu.Unlock()
	for ph, m := range codes {
		for st := range m {
			if st >= 500 && st != 503 {
				t.Errorf("phase %s: submit answered %d (want 201 or 503)", ph, st)
			}
		}
	}
	if codes["down"][503] == 0 {
		t.Errorf("no 503 while the database was down: %v", codes["down"])
	}
	if codes["after"][201] == 0 {
		t.Errorf("no submit accepted after the database came back: %v", codes["after"])
	}
	t.Logf("RESULT %s: submit answers by phase %v; %s", t.Name(), codes, sum)
}
