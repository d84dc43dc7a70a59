package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/orchtest"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/store/storetest"
	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
	"github.com/simpletuner/simpletuner-orchestration/internal/worker"
)

func forEachStore(t *testing.T, fn func(t *testing.T, open func(t *testing.T) store.Store)) {
	storetest.ForEach(t, func(t *testing.T, open storetest.Opener) {
		fn(t, func(t *testing.T) store.Store { return open(t) })
	})
}

// orch is an orchestrator.Server on a loopback HTTP server.
type orch struct {
	*orchtest.Orch
	t    *testing.T
	st   store.Store
	srv  *orchestrator.Server
	logs *testutil.Buffer
}

// fastOptions are production options with the tests' timers, but for the
// heartbeat timeout below.
func fastOptions(t *testing.T) orchestrator.Options {
	tm := orchtest.Timers
	// Tests cut a live workerd off and wait for its job to move on; workerd's
	// self-fence (2 s, startWorker) stays below it.
	tm.HeartbeatTimeout = 3 * time.Second
	return orchestrator.OptionsFrom(tm.Config(t))
}

// startOrch serves a Server over st and makes an admin token unless one is
// given (a restarted orchestrator on the same store keeps the old one).
func startOrch(t *testing.T, st store.Store, opt orchestrator.Options, admin string) *orch {
	t.Helper()
	logs := &testutil.Buffer{}
	srv := orchestrator.New(st, opt, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("orchestrator log:\n%s", logs.String())
		}
	})
	return &orch{Orch: orchtest.Serve(t, st, srv, srv.Handler(), admin), t: t, st: st, srv: srv, logs: logs}
}

// createWorker makes a persistent worker; orchtest's leaves its labels
// unlocked, so the tests' workers report their own labels and inventory.
func (o *orch) createWorker(name string) (id, token string) {
	o.t.Helper()
	return o.CreateWorker(name, "persistent", nil)
}

func (o *orch) submit(config map[string]any) string {
	o.t.Helper()
	return o.Submit(map[string]any{"config": config})
}

func (o *orch) job(id string) map[string]any {
	o.t.Helper()
	return o.Job(id)
}

func (o *orch) heartbeats() int64 { return o.srv.Metrics().Heartbeats.Load() }

// reportGate is a reverse proxy between a worker and the orchestrator that can
// hold the worker's terminal status reports (completed, failed, cancelled)
// until released ("hold"), answer them 503 as an orchestrator in trouble
// would ("fail"), or hold every request but the open stream ("cut", a
// partition). Everything else passes through, the SSE stream unbuffered.
type reportGate struct {
	t      *testing.T
	http   *httptest.Server
	mu     sync.Mutex
	target *url.URL
	mode   string        // "", "hold", "fail" or "cut"
	open   chan struct{} // closed by release
	seen   int           // terminal reports that reached the gate while not passing
}

func newReportGate(t *testing.T, target string) *reportGate {
	g := &reportGate{t: t, open: make(chan struct{})}
	g.retarget(target)
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			g.mu.Lock()
			r.SetURL(g.target)
			g.mu.Unlock()
		},
		FlushInterval: -1,
	}
	g.http = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		mode, open := g.mode, g.open
		g.mu.Unlock()
		if mode == "cut" && r.URL.Path != "/api/workers/stream" { // a partition: nothing gets through
			select {
			case <-open:
			case <-r.Context().Done():
				return
			}
		}
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/status") {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			var rep struct{ Status string }
			_ = json.Unmarshal(body, &rep)
			if rep.Status == "completed" || rep.Status == "failed" || rep.Status == "cancelled" {
				g.mu.Lock()
				mode, open := g.mode, g.open
				if mode == "hold" || mode == "fail" {
					g.seen++
				}
				g.mu.Unlock()
				switch mode {
				case "fail":
					http.Error(w, `{"detail":"the database is unreachable","error":"unavailable"}`, http.StatusServiceUnavailable)
					return
				case "hold":
					select {
					case <-open:
					case <-r.Context().Done():
						return
					}
				}
			}
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(g.http.Close)
	return g
}

func (g *reportGate) retarget(target string) {
	u, err := url.Parse(target)
	if err != nil {
		g.t.Fatal(err)
	}
	g.mu.Lock()
	g.target = u
	g.mu.Unlock()
}

func (g *reportGate) set(mode string) {
	g.mu.Lock()
	g.mode = mode
	if mode == "hold" || mode == "cut" {
		g.open = make(chan struct{})
	}
	g.mu.Unlock()
}

// release lets held reports through and passes every later one.
func (g *reportGate) release() {
	g.mu.Lock()
	g.mode = ""
	close(g.open)
	g.mu.Unlock()
}

func (g *reportGate) stopped() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.seen
}

// runningWorker is workerd's engine serving in the background.
type runningWorker struct {
	*worker.Worker
	stateDir string
	logs     *testutil.Buffer
}

// startWorker runs workerd's engine against url; tweak may change its options.
func startWorker(t *testing.T, url, token string, tweak ...func(*worker.Options)) *runningWorker {
	t.Helper()
	logs := &testutil.Buffer{}
	opt := worker.Options{
		URL: url, Token: token, Name: "w", Persistent: true,
		StateDir:       t.TempDir(),
		Command:        []string{demoTrainer},
		CancelGrace:    300 * time.Millisecond,
		SelfFenceAfter: 2 * time.Second,
		ReconnectMax:   100 * time.Millisecond,
		Logger:         slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Timers: worker.Timers{
			ReconnectBase:  10 * time.Millisecond,
			PingInterval:   200 * time.Millisecond,
			StableAfter:    time.Second,
			ReportRetry:    50 * time.Millisecond,
			LogPoll:        10 * time.Millisecond,
			LogDrain:       2 * time.Second,
			RequestTimeout: 2 * time.Second,
		},
	}
	for _, f := range tweak {
		f(&opt)
	}
	w, err := worker.New(opt)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = w.Serve(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Errorf("worker did not stop")
		}
		if t.Failed() {
			t.Logf("worker log:\n%s", logs.String())
		}
	})
	return &runningWorker{Worker: w, stateDir: opt.StateDir, logs: logs}
}
