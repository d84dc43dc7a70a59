package faults

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/simpletuner/simpletuner-orchestration/test/e2e/e2etest"
)

// 1,000 simulated protocol-2 workers (in-process: register, stream, heartbeat)
// reconnect at once after an orchestrator kill -9: all end up connected and
// idle; when they leave, the orchestrator's descriptors, sockets, streams and
// this process's goroutines go back to their baseline.
func TestThousandWorkersReconnectAtOnce(t *testing.T) {
	n := 1000
	o := StartOrchestratorWith(t, OrchOptions{Metrics: true, HeartbeatInterval: "5s", HeartbeatTimeout: "60s",
		HealthCheck: "1s", StartupGrace: "60s", PingInterval: "5s", LogLevel: "info"})
	tr := SimTransport()
	cl := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	sims := make([]*SimWorker, n)
	created := time.Now()
	parallel(n, 8, func(i int) {
		id, token := o.CreateWorker(fmt.Sprintf("sim-%04d", i), true, nil)
		sims[i] = &SimWorker{ID: id, Token: token, Name: fmt.Sprintf("sim-%04d", i), BaseURL: o.URL, Client: cl}
	})
	t.Logf("created %d workers in %s", n, time.Since(created).Round(time.Millisecond))
	connectAll := func() time.Duration {
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
		defer cancel()
		var failed atomic.Int32
		parallel(n, n, func(i int) {
			if err := sims[i].Connect(ctx); err != nil {
				failed.Add(1)
				t.Error(err)
			}
		})
		if failed.Load() > 0 {
			t.Fatalf("%d workers never connected", failed.Load())
		}
		Eventually(t, 60*time.Second, "all workers connected and idle", func() bool {
			_, st := o.Do("GET", "/api/queue/stats", nil)
			w, _ := st["workers"].(map[string]any)
			return w["idle"] == float64(n) && o.Metric("simpletuner_sse_connections") == int64(n)
		})
		return time.Since(start)
	}
	first := connectAll()
	t.Logf("first connect of %d workers: %s", n, first.Round(time.Millisecond))

	h := NewHistory(t, o)
	h.Fault("kill -9 orchestrator with %d workers connected", n)
	o.P.Kill9()
	for _, s := range sims {
		s.Close()
	}
	tr.CloseIdleConnections()
	o.Restart()
	base := takeBaseline(o)
	h.Fault("%d workers reconnect at once", n)
	again := connectAll()
	during := ProcUsage(o.P.Pid())
	t.Logf("RESULT %s: %d workers all connected and idle %s after the restart released them at once; orchestrator with them: %s",
		t.Name(), n, again.Round(time.Millisecond), during)
	// A heartbeat each, then everyone leaves.
	parallel(n, 64, func(i int) {
		if err := sims[i].Heartbeat(context.Background()); err != nil {
			t.Error(err)
		}
	})
	parallel(n, 64, func(i int) {
		_ = sims[i].Disconnect(context.Background())
		sims[i].Close()
	})
	tr.CloseIdleConnections()
	Eventually(t, 30*time.Second, "all workers offline", func() bool {
		_, st := o.Do("GET", "/api/queue/stats", nil)
		w, _ := st["workers"].(map[string]any)
		return w["offline"] == float64(n)
	})
	runtime.GC()
	base.check(t, o)
	h.Finish()
	h.Check(Expect{MaxRequeues: 0})
}

// parallel runs f(0..n-1) on at most width goroutines.
func parallel(n, width int, f func(i int)) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, width)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			f(i)
		}()
	}
	wg.Wait()
}
