package faults

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/pgtest"
	. "github.com/simpletuner/simpletuner-orchestration/test/e2e/e2etest"
)

// Two orchestrator replicas on one PostgreSQL database, workers given both
// URLs. kill -9 the replica holding most streams while jobs run: every
// worker moves to the survivor, the running jobs carry on (none requeued)
// and dispatch resumes. Then cut only the LISTEN connection of one replica
// (pg_terminate_backend): it must listen again without losing the wake-up
// of a job submitted elsewhere meanwhile, and a token rotated on the other
// replica must still close the stream the old token opened.
func TestReplicaFailover(t *testing.T) {
	fullOnly(t)
	dbURL := pgtest.Start(t)
	// A long scheduler tick: dispatch to a replica's workers must come from
	// wake-ups (its own, or notifications from the other replica).
	replica := func(name string) *Orch {
		return StartOrchestratorWith(t, OrchOptions{Metrics: true, DBURL: dbURL + "&application_name=" + name,
			HeartbeatTimeout: "10s", SchedulerInterval: "20s"})
	}
	a, b := replica("replica-a"), replica("replica-b")
	h := NewHistory(t, b)
	both, bothB := a.URL+","+b.URL, b.URL+","+a.URL
	spec := func(name, pool, url string) WorkerSpec {
		return WorkerSpec{Name: name, Persistent: true, URL: url, SelfFenceAfter: "5s", Labels: map[string]string{"pool": pool}, Command: h.WrapperCommand()}
	}
	var workers []*Wrk
	for _, name := range []string{"a1", "a2", "a3"} {
		workers = append(workers, b.StartWorker(spec(name, "busy", both)))
	}
	workers = append(workers, b.StartWorker(spec("spare", "spare", both)), b.StartWorker(spec("b1", "other", bothB)))
	Eventually(t, 10*time.Second, "4 streams on replica a, 1 on b", func() bool {
		return a.Metric("simpletuner_sse_connections") == 4 && b.Metric("simpletuner_sse_connections") == 1
	})
	var running []string
	for range 3 {
		_, id := h.Submit(trainFor(6), map[string]any{"worker_labels": map[string]string{"pool": "busy"}})
		running = append(running, id)
	}
	for _, id := range running {
		Eventually(t, 20*time.Second, "job "+id+" training", func() bool { return len(JobProcs(id)) > 0 })
	}

	h.Fault("kill -9 replica a (4 of 5 streams, 3 running jobs)")
	a.P.Kill9()
	killed := time.Now()
	_, next := h.Submit(trainFor(0.3), map[string]any{"worker_labels": map[string]string{"pool": "spare"}})
	var allOnB, dispatched time.Duration
	Eventually(t, 30*time.Second, "every worker streaming to replica b and the next job dispatched", func() bool {
		if allOnB == 0 && b.Metric("simpletuner_sse_connections") == int64(len(workers)) {
			allOnB = time.Since(killed)
		}
		if st := b.Job(next)["status"]; dispatched == 0 && (st == "dispatched" || st == "running" || st == "completed") {
			dispatched = time.Since(killed)
		}
		return allOnB > 0 && dispatched > 0
	})
	for _, id := range running {
		b.WaitJob(id, "completed", 30*time.Second)
	}
	t.Logf("RESULT %s/kill: every worker on the survivor %s after the kill, next submit dispatched %s after it",
		t.Name(), allOnB.Round(time.Millisecond), dispatched.Round(time.Millisecond))
	if dispatched > 5*time.Second {
		t.Errorf("dispatch resumed %s after the kill, want ≤ 5 s", dispatched.Round(time.Millisecond))
	}

	// The LISTEN connection of one replica alone.
	h.Fault("replica a restarted")
	a.Restart()
	listener := b.StartWorker(WorkerSpec{Name: "on-a", Persistent: true, URL: a.URL, Labels: map[string]string{"pool": "listen"}, Command: h.WrapperCommand()})
	workers = append(workers, listener)
	id, token := b.CreateWorker("sim-on-a", true, nil)
	sim := &SimWorker{ID: id, Token: token, Name: "sim-on-a", BaseURL: a.URL, Client: SimClient()}
	if err := sim.Connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	Eventually(t, 10*time.Second, "two streams on replica a", func() bool { return a.Metric("simpletuner_sse_connections") == 2 })
	db, err := sql.Open("postgres", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	h.Fault("pg_terminate_backend: replica a's LISTEN connection")
	var cut int
	if err := db.QueryRow(`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = 'replica-a' AND query LIKE 'LISTEN%'`).Scan(&cut); err != nil || cut != 1 {
		t.Fatalf("terminating replica a's listener: %d backends, %v", cut, err)
	}
	terminated := time.Now()
	_, woken := h.Submit(trainFor(0.3), map[string]any{"worker_labels": map[string]string{"pool": "listen"}})
	if st, m := b.Do("POST", "/api/admin/workers/"+id+"/token", nil); st != 200 {
		t.Fatalf("rotate: %d %v", st, m)
	} else if tok, _ := m["token"].(string); tok != "" {
		NoteSecret("worker token", tok)
	}
	var wokeAfter, closedAfter time.Duration
	Eventually(t, 30*time.Second, "the job for replica a's worker dispatched and the rotated token's stream closed", func() bool {
		if st := b.Job(woken)["status"]; wokeAfter == 0 && st != "queued" {
			wokeAfter = time.Since(terminated)
		}
		if closedAfter == 0 && !sim.StreamOpen() {
			closedAfter = time.Since(terminated)
		}
		return wokeAfter > 0 && closedAfter > 0
	})
	relisten := strings.Contains(a.P.Output(), "notification listener reconnected")

	h.WaitAllTerminal(60 * time.Second)
	h.Finish()
	sum := h.Check(Expect{MaxRequeues: 0, Statuses: []string{"completed"}})
	if !relisten {
		t.Errorf("replica a never said it listens again")
	}
	if wokeAfter > 5*time.Second {
		t.Errorf("the job submitted on b while a's listener was cut waited %s (a's scheduler tick is 20 s)", wokeAfter.Round(time.Millisecond))
	}
	if closedAfter > 5*time.Second {
		t.Errorf("the stream of a token rotated on b closed on a only %s after the listener cut", closedAfter.Round(time.Millisecond))
	}
	t.Logf("RESULT %s/listen: after the LISTEN connection was cut, a job submitted on b dispatched on a %s later, the rotated token's stream closed %s later; %s",
		t.Name(), wokeAfter.Round(time.Millisecond), closedAfter.Round(time.Millisecond), sum)
}
