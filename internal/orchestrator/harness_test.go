// The orchestrator's tests are an external package: they assemble the
// server as every other package's tests do, with orchestrator.New over a
// real store, orchtest.Serve and orchtest.Timers, and reach the few parts
// they must drive directly through export_test.go.
package orchestrator_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/artifacts"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/orchtest"
	"github.com/simpletuner/simpletuner-orchestration/internal/pgtest"
	"github.com/simpletuner/simpletuner-orchestration/internal/slapdtest"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/store/storetest"
	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
)

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Stop()
	slapdtest.Stop()
	os.Exit(code)
}

// backends opens a fresh store of each kind.
var backends = map[string]storetest.Opener{
	"sqlite":   func(t testing.TB) store.Store { return storetest.Open(t, "sqlite") },
	"postgres": func(t testing.TB) store.Store { return storetest.Open(t, "postgres") },
}

// forEachStore runs fn once per backend, as parallel subtests.
func forEachStore(t *testing.T, fn func(t *testing.T, open func(t testing.TB) store.Store)) {
	t.Helper()
	storetest.ForEach(t, func(t *testing.T, open storetest.Opener) { fn(t, open) })
}

// eventWait bounds every wait for an event or a state the test expects to
// come. It is long because a wait that is met ends at once, while one that
// runs out on a loaded machine (the race detector, PostgreSQL and another
// suite sharing two cores) fails a correct test.
const eventWait = 30 * time.Second

// testOptions are production options with the tests' timers (orchtest.Timers).
func testOptions(t testing.TB) orchestrator.Options {
	return orchestrator.OptionsFrom(orchtest.Timers.Config(t))
}

// env is an orchestrator under test. Its API calls (Do, AdminDo, Must,
// Submit, Job, Cancel, Queue, Worker, CreateWorker) are orchtest's.
type env struct {
	*orchtest.Orch
	t    testing.TB
	srv  *orchestrator.Server
	st   store.Store
	logs *testutil.Buffer
}

// setup starts an orchestrator over a real store on a loopback HTTP server.
func setup(t testing.TB, st store.Store, mutate ...func(*orchestrator.Options)) *env {
	t.Helper()
	opt := testOptions(t)
	for _, m := range mutate {
		m(&opt)
	}
	return startEnv(t, st, opt)
}

func startEnv(t testing.TB, st store.Store, opt orchestrator.Options) *env {
	t.Helper()
	logs := &testutil.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv := orchestrator.New(st, opt, log)
	arts, err := artifacts.NewLocal(filepath.Join(t.TempDir(), "artifacts"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { arts.Close() })
	srv.SetArtifacts(artifacts.New(arts, artifacts.Limits{}))
	o := orchtest.Serve(t, st, srv, srv.Handler(), "")
	return &env{Orch: o, t: t, srv: srv, st: st, logs: logs}
}

// agent is a test client that speaks like SimpleTuner's Python agent: it reads
// only lines starting with "data: " and dispatches on the JSON "type".
type agent struct {
	e        *env
	id       string
	token    string
	protocol int
	events   chan map[string]any
	closed   chan struct{}
	cancel   context.CancelFunc

	mu       sync.Mutex
	current  string        // job held, as the agent would report it in heartbeats
	silent   bool          // set once: no heartbeat is sent after it
	quiet    chan struct{} // closed by silence: wakes the keep-alive loop
	loopDone chan struct{} // closed when the keep-alive loop has returned
}

// silence stops the agent's heartbeats, as if its host vanished, and returns
// once none is in flight any more: a heartbeat that left just before would
// otherwise arrive after the test has seen the worker go quiet.
func (a *agent) silence() {
	a.mu.Lock()
	if !a.silent {
		a.silent = true
		close(a.quiet)
	}
	done := a.loopDone
	a.mu.Unlock()
	if done != nil {
		<-done
	}
}

func (e *env) newAgent(id, token string, protocol int) *agent {
	return &agent{e: e, id: id, token: token, protocol: protocol, quiet: make(chan struct{})}
}

func (a *agent) hdr() map[string]string { return map[string]string{"X-Worker-Token": a.token} }

func (a *agent) register(extra map[string]any) orchtest.Reply {
	a.e.t.Helper()
	body := map[string]any{"name": "gpu-host", "persistent": false, "current_job_id": nil,
		"gpu_info": map[string]any{"name": "NVIDIA A100-SXM4-80GB", "vram_gb": 85.1, "count": 2, "driver": "550.54", "accelerator": "cuda"}}
	if a.protocol >= 2 {
		body["protocol"] = 2
	}
	for k, v := range extra {
		body[k] = v
	}
	return a.e.Do("POST", "/api/workers/register", a.hdr(), body)
}

// connect opens the SSE stream and returns once the server accepted it.
func (a *agent) connect() {
	a.e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", a.e.URL+"/api/workers/stream?worker_id="+a.id, nil)
	req.Header.Set("X-Worker-Token", a.token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		a.e.t.Fatalf("stream: %v", err)
	}
	if res.StatusCode != 200 {
		cancel()
		a.e.t.Fatalf("stream: HTTP %d", res.StatusCode)
	}
	events, closed := make(chan map[string]any, 100), make(chan struct{})
	a.events, a.closed, a.cancel = events, closed, cancel
	go func() {
		defer close(closed)
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			line := sc.Text()
			if !strings.HasPrefix(line, "data: ") {
				continue
			}
			var ev map[string]any
			if json.Unmarshal([]byte(line[6:]), &ev) != nil {
				continue
			}
			if ev["type"] == "ping" {
				continue
			}
			events <- ev
		}
	}()
	a.e.t.Cleanup(cancel)
	testutil.Eventually(a.e.t, eventWait, "stream registered", func() bool { return a.e.srv.Hub().Connected(a.id) })
}

func (a *agent) next(typ string, timeout time.Duration) map[string]any {
	a.e.t.Helper()
	deadline := time.After(timeout)
	take := func(ev map[string]any) bool {
		if ev["type"] != typ {
			return false
		}
		if typ == "job_submit" {
			a.mu.Lock()
			a.current = ev["job_id"].(string)
			a.mu.Unlock()
		}
		return true
	}
	for {
		select {
		case ev := <-a.events:
			if take(ev) {
				return ev
			}
		case <-a.closed:
			// The reader has returned: what it read is all there is.
			for {
				select {
				case ev := <-a.events:
					if take(ev) {
						return ev
					}
				default:
					a.e.t.Fatalf("worker %s: its stream closed before a %s event (worker: %v)\n%s", a.id, typ, a.e.Worker(a.id), a.e.logTail())
				}
			}
		case <-deadline:
			a.e.t.Fatalf("worker %s: no %s event within %s (worker: %v)\n%s", a.id, typ, timeout, a.e.Worker(a.id), a.e.logTail())
		}
	}
}

// logTail is the end of the orchestrator's log, for a failure that needs
// to show what the engine decided.
func (e *env) logTail() string {
	const keep = 16 << 10
	l := e.logs.String()
	if len(l) > keep {
		l = "…" + l[len(l)-keep:]
	}
	return "orchestrator log:\n" + l
}

func (a *agent) noEvent(typ string, wait time.Duration) {
	a.e.t.Helper()
	deadline := time.After(wait)
	for {
		select {
		case ev := <-a.events:
			if ev["type"] == typ {
				a.e.t.Fatalf("worker %s: unexpected %s event: %v", a.id, typ, ev)
			}
		case <-deadline:
			return
		}
	}
}

func (a *agent) heartbeat(status string, job any, extra map[string]any) orchtest.Reply {
	body := map[string]any{"worker_id": a.id, "status": status, "current_job_id": job}
	for k, v := range extra {
		body[k] = v
	}
	return a.e.Do("POST", "/api/workers/heartbeat", a.hdr(), body)
}

func (a *agent) report(jobID, status string, extra map[string]any) orchtest.Reply {
	if status == "completed" || status == "failed" || status == "cancelled" {
		a.mu.Lock()
		if a.current == jobID {
			a.current = ""
		}
		a.mu.Unlock()
	}
	body := map[string]any{"status": status}
	for k, v := range extra {
		body[k] = v
	}
	return a.e.Do("POST", "/api/workers/job/"+jobID+"/status", a.hdr(), body)
}

// held is the default heartbeat content: busy with the held job, else idle.
func (a *agent) held() (string, any) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.current != "" {
		return "busy", a.current
	}
	return "idle", nil
}

// keepAlive heartbeats every interval until the test ends, the agent is
// silenced or its token is refused.
func (a *agent) keepAlive(status func() (string, any)) {
	ctx, cancel := context.WithCancel(context.Background())
	a.e.t.Cleanup(cancel)
	url, token := a.e.URL, a.token // fixed for this loop: a restart test swaps a.e
	done := make(chan struct{})
	a.mu.Lock()
	a.loopDone = done
	a.mu.Unlock()
	go func() {
		defer close(done)
		for {
			a.mu.Lock()
			silent := a.silent
			a.mu.Unlock()
			if silent {
				return
			}
			st, job := status()
			body, _ := json.Marshal(map[string]any{"worker_id": a.id, "status": st, "current_job_id": job})
			req, _ := http.NewRequestWithContext(ctx, "POST", url+"/api/workers/heartbeat", bytes.NewReader(body))
			req.Header.Set("X-Worker-Token", token)
			if res, err := http.DefaultClient.Do(req); err == nil {
				res.Body.Close()
				// A refused token stays refused: workerd stops there too,
				// rather than use up its address's failed authentications.
				if res.StatusCode == http.StatusUnauthorized {
					return
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-a.quiet:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
}

// startAgent registers, connects and returns a ready idle agent.
func (e *env) startAgent(name string, labels map[string]string, gpuInfo map[string]any) *agent {
	e.t.Helper()
	id, token := e.CreateWorker(name, "persistent", labels)
	a := e.newAgent(id, token, 2)
	extra := map[string]any{"name": name}
	if gpuInfo != nil {
		extra["gpu_info"] = gpuInfo
	}
	e.Must(a.register(extra), 200)
	a.connect()
	a.keepAlive(a.held)
	return a
}
