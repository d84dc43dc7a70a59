package orchestrator_test

import (
	"context"
	"database/sql"
	"log/slog"
	neturl "net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator"
	"github.com/simpletuner/simpletuner-orchestration/internal/pgtest"
	"github.com/simpletuner/simpletuner-orchestration/internal/store/postgres"
	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
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
					// Its heartbeats list the job until it ends, as workerd's
					// do: one left out of two in a row is taken for lost.
					a.mu.Lock()
					a.current = id
					a.mu.Unlock()
					attempt := map[string]any{"attempt": ev["attempt"]}
					a.report(id, "starting", attempt)
					a.report(id, "completed", attempt)
					done <- id
				case <-a.closed:
					return
				}
			}
		}()
	}
	var ids []string
	for i := range jobs {
		ids = append(ids, envs[i%2].Submit(map[string]any{})) // half submitted on each instance
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
			t.Errorf("job %s ran %d times; its attempts: %v", id, runs[id], envs[0].Job(id)["attempts"])
		}
		if s := envs[0].Job(id)["status"]; s != "completed" {
			t.Errorf("job %s is %v", id, s)
		}
	}
}

// twoReplicas starts alpha and beta on one new PostgreSQL database and
// returns them with the database URL.
func twoReplicas(t *testing.T, mutate func(name string, o *orchestrator.Options)) (alpha, beta *env, url string) {
	t.Helper()
	url = pgtest.Start(t)
	var envs []*env
	for _, name := range []string{"alpha", "beta"} {
		st, err := postgres.Open(context.Background(), url, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		opt := testOptions(t)
		opt.InstanceID = name
		if mutate != nil {
			mutate(name, &opt)
		}
		envs = append(envs, startEnv(t, st, opt))
	}
	return envs[0], envs[1], url
}

// cutListeners keeps every instance from hearing notifications: new
// connections to the database are refused (the pools keep the ones they
// have) and the LISTEN connections are ended. undo lets them reconnect.
func cutListeners(t *testing.T, url string) (undo func()) {
	t.Helper()
	u, _ := neturl.Parse(url)
	name := strings.TrimPrefix(u.Path, "/")
	u.Path = "/postgres" // a database may not shut itself off
	db, err := sql.Open("postgres", u.String())
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.Exec(q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// Each instance subscribes when its server starts, and its listener
	// connects and sends LISTEN in the background: wait for both.
	const listening = `FROM pg_stat_activity WHERE datname = $1 AND query ILIKE 'listen %' AND pid <> pg_backend_pid()`
	testutil.Eventually(t, eventWait, "both instances listening", func() bool {
		var n int
		if err := db.QueryRow(`SELECT count(*) `+listening, name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 2
	})
	exec(`ALTER DATABASE ` + name + ` ALLOW_CONNECTIONS false`)
	var ended int
	if err := db.QueryRow(`SELECT count(pg_terminate_backend(pid)) `+listening, name).Scan(&ended); err != nil {
		t.Fatal(err)
	}
	if ended != 2 {
		t.Fatalf("ended %d LISTEN connections; want the two instances'", ended)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			exec(`ALTER DATABASE ` + name + ` ALLOW_CONNECTIONS true`)
			db.Close()
		})
	}
}

// A worker's token is rotated on alpha while beta, which holds the worker's
// stream, hears no notifications. Before the stream-check timer fires, a job
// with an hf_token is queued: beta claims it for the worker, but checks the
// token before writing the job to the stream, withdraws the attempt and
// closes the stream; the old token never sees the job.
func TestRotatedTokenGetsNoDispatchOnAReplicaThatMissedTheNotification(t *testing.T) {
	t.Parallel()
	alpha, beta, url := twoReplicas(t, func(name string, o *orchestrator.Options) {
		o.RecheckInterval = time.Hour // only the check at dispatch can help
		o.SchedulerInterval = 100 * time.Millisecond
		o.HeartbeatTimeout = time.Hour
	})
	// The agent sends no heartbeats: a refused one would close its stream
	// too, before the dispatch check this test is about.
	id, token := beta.CreateWorker("w", "persistent", nil)
	a := beta.newAgent(id, token, 2)
	beta.Must(a.register(map[string]any{"name": "w"}), 200)
	a.connect()
	undo := cutListeners(t, url)
	defer undo()
	alpha.Must(alpha.AdminDo("POST", "/api/admin/workers/"+a.id+"/token", nil), 200)
	jobID := alpha.Submit(map[string]any{"hf_token": "hf_secret_for_the_right_worker"})
	select {
	case <-a.closed:
	case ev := <-a.events:
		t.Fatalf("the stream of the rotated token got %v", ev)
	case <-time.After(10 * time.Second):
		t.Fatal("the stream of the rotated token is still open")
	}
	undo() // the pools may need new connections from here on
	var j map[string]any
	// Queued with every attempt ended: a claim made while the closed stream
	// was being detached may show in the job read just after it went back
	// to the queue, not yet withdrawn.
	testutil.Eventually(t, eventWait, "the attempts withdrawn", func() bool {
		j = alpha.Job(jobID)
		atts, _ := j["attempts"].([]any)
		if j["status"] != "queued" || len(atts) == 0 {
			return false
		}
		for _, a := range atts {
			if a.(map[string]any)["ended_at"] == nil {
				return false
			}
		}
		return true
	})
	// A claim made while the closed stream was still being detached is
	// withdrawn too; none of them ever started.
	atts := j["attempts"].([]any)
	for _, a := range atts {
		if a.(map[string]any)["outcome"] != "withdrawn" {
			t.Fatalf("attempts %v; want every one withdrawn", atts)
		}
	}
	if first := atts[0].(map[string]any)["error"].(string); !strings.Contains(first, "no longer its token") {
		t.Fatalf("the first attempt ended with %q", first)
	}
	if !strings.Contains(beta.logs.String(), "job not sent: the token that opened the worker's stream is no longer its token") {
		t.Errorf("beta did not log why:\n%s", beta.logs.String())
	}
}

// The same cut, no job: beta's timer finds the rotated token and closes the
// stream it opened.
func TestRotatedTokenLosesItsStreamOnAReplicaThatMissedTheNotification(t *testing.T) {
	t.Parallel()
	alpha, beta, url := twoReplicas(t, func(name string, o *orchestrator.Options) { o.RecheckInterval = 200 * time.Millisecond })
	a := beta.startAgent("w", nil, nil)
	undo := cutListeners(t, url)
	defer undo()
	alpha.Must(alpha.AdminDo("POST", "/api/admin/workers/"+a.id+"/token", nil), 200)
	select {
	case <-a.closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream of the rotated token is still open")
	}
	undo()
	testutil.Eventually(t, eventWait, "the worker shown disconnected", func() bool {
		return alpha.Worker(a.id)["connected"] == false
	})
}
