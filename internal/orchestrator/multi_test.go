package orchestrator

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/pgtest"
	"github.com/simpletuner/simpletuner-orchestration/internal/store/postgres"
)

// TestTwoInstancesOnePostgres runs two orchestrators on one database, with
// workers attached to each, and checks that every job ran exactly once.
func TestTwoInstancesOnePostgres(t *testing.T) {
	t.Parallel()
	url := pgtest.Start(t)
	var envs []*env
	for i := range 2 {
		st, err := postgres.Open(context.Background(), url, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		opt := testOptions(t)
		opt.InstanceID = []string{"alpha", "beta"}[i]
		opt.SchedulerInterval = time.Second // wake-ups via NOTIFY do the fast work
		envs = append(envs, startEnv(t, st, opt))
	}
	const jobs = 40
	var mu sync.Mutex
	runs := map[string]int{}
	var agents []*agent
	for i := range 6 {
		e := envs[i%2]
		a := e.startAgent("w"+string(rune('a'+i)), nil, nil)
		agents = append(agents, a)
	}
	done := make(chan string, jobs*2)
	for _, a := range agents {
		go func() {
			for {
				select {
				case ev := <-a.events:
					if ev["type"] != "job_submit" {
						continue
					}
					id := ev["job_id"].(string)
					mu.Lock()
					runs[id]++
					mu.Unlock()
					a.e.do("POST", "/api/workers/job/"+id+"/status", a.hdr(), map[string]any{"status": "starting", "attempt": ev["attempt"]})
					a.e.do("POST", "/api/workers/job/"+id+"/status", a.hdr(), map[string]any{"status": "completed", "attempt": ev["attempt"]})
					done <- id
				case <-a.closed:
					return
				}
			}
		}()
	}
	var ids []string
	for i := range jobs {
		ids = append(ids, envs[i%2].submit(map[string]any{})) // half submitted on each instance
	}
	for range jobs {
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("only some jobs ran: %v", runs)
		}
	}
	for _, id := range ids {
		if runs[id] != 1 {
			t.Errorf("job %s ran %d times", id, runs[id])
		}
		if s := envs[0].job(id)["status"]; s != "completed" {
			t.Errorf("job %s is %v", id, s)
		}
	}
}
