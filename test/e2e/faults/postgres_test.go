package faults

import (
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/pgtest"
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

// PostgreSQL behind a connection that stops forwarding without closing (a
// black-holing proxy or firewall): the pool's connections and the
// notification listener must time out rather than hang, /readyz must turn
// 503, submits must be refused quickly, and service must come back by itself
// once the path heals. No accepted job is lost.
func TestPostgresHalfOpen(t *testing.T) {
	fullOnly(t)
	dbURL, err := url.Parse(pgtest.Start(t))
	if err != nil {
		t.Fatal(err)
	}
	px := NewProxy(t, dbURL.Host)
	dbURL.Host = px.Addr()
	const dbTimeout = 2 * time.Second
	o := StartOrchestratorWith(t, OrchOptions{Metrics: true, DBURL: dbURL.String(), DBTimeout: dbTimeout.String(),
		HeartbeatTimeout: "30s", StartupGrace: "5s"})
	h := NewHistory(t, o)
	for i := range 2 {
		o.StartWorker(WorkerSpec{Name: fmt.Sprintf("w%d", i), Persistent: true, SelfFenceAfter: "20s", Command: h.ExecWrapperCommand()})
	}
	var mu sync.Mutex
	codes := map[string]map[int]int{}
	worst := map[string]time.Duration{}
	phase := "before"
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
			began := time.Now()
			st, _ := h.Submit(trainFor(0.5), nil)
			took := time.Since(began)
			mu.Lock()
			if codes[phase] == nil {
				codes[phase] = map[int]int{}
			}
			codes[phase][st]++
			worst[phase] = max(worst[phase], took)
			mu.Unlock()
		}
	}()
	setPhase := func(p string) { mu.Lock(); phase = p; mu.Unlock() }
	time.Sleep(2 * time.Second)
	h.Fault("black-hole the database connection (no FIN, no RST)")
	setPhase("cut")
	px.SetCut(true)
	cut := time.Now()
	// /readyz gives the database 2 s; the probe waits a little longer.
	var unreadyAfter, listenerAfter time.Duration
	Eventually(t, 30*time.Second, "readyz 503 while the database is silent", func() bool {
		if o.ReadyWithin(5*time.Second) == 503 {
			unreadyAfter = time.Since(cut)
			return true
		}
		return false
	})
	// The LISTEN connection only reads: its ping must find the silence.
	Eventually(t, 30*time.Second, "the notification listener noticing the silence", func() bool {
		if strings.Contains(o.P.Output(), "notification listener disconnected") {
			listenerAfter = time.Since(cut)
			return true
		}
		return false
	})
	// Long enough that a request hanging for the whole cut would show.
	time.Sleep(time.Until(cut.Add(4*dbTimeout + 4*time.Second)))
	h.Fault("the path to the database heals")
	setPhase("healed")
	px.SetCut(false)
	healed := time.Now()
	var readyAfter time.Duration
	Eventually(t, 30*time.Second, "readyz 200 again", func() bool {
		if o.Ready() == 200 {
			readyAfter = time.Since(healed)
			return true
		}
		return false
	})
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()
	h.WaitAllTerminal(60 * time.Second)
	h.Finish()
	sum := h.Check(Expect{MaxRequeues: -1, Statuses: []string{"completed"}})
	mu.Lock()
	defer mu.Unlock()
	for ph, m := range codes {
		for st := range m {
			if st != 201 && st != 503 {
				t.Errorf("phase %s: submit answered %d (want 201 or 503)", ph, st)
			}
		}
	}
	if codes["healed"][201] == 0 {
		t.Errorf("no submit accepted after the path healed: %v", codes["healed"])
	}
	if limit := 2*dbTimeout + 3*time.Second; worst["cut"] > limit {
		t.Errorf("a submit during the cut took %s, want ≤ %s", worst["cut"].Round(time.Millisecond), limit)
	}
	if !strings.Contains(o.P.Output(), "notification listener reconnected") {
		t.Errorf("the notification listener never reconnected")
	}
	t.Logf("RESULT %s: readyz 503 %s after the cut (database timeout %s), listener noticed %s after it, 200 again %s after the heal; submit answers by phase %v, slowest by phase %v; %s",
		t.Name(), unreadyAfter.Round(time.Millisecond), dbTimeout, listenerAfter.Round(time.Millisecond), readyAfter.Round(time.Millisecond), codes, worst, sum)
}
