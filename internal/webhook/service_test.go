package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/lifecycle"
	"github.com/simpletuner/simpletuner-orchestration/internal/pgtest"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/store/postgres"
	"github.com/simpletuner/simpletuner-orchestration/internal/store/storetest"
	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
	"github.com/simpletuner/simpletuner-orchestration/internal/webhook/spec"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// fast are settings scaled down for tests: retries within milliseconds.
func fast() Options {
	return Options{Timeout: 5 * time.Second, RetryFor: time.Hour, BackoffMin: 5 * time.Millisecond, BackoffMax: 40 * time.Millisecond,
		Concurrency: 4, PollInterval: 20 * time.Millisecond, Guard: spec.Guard{AllowLocal: true}, InstanceID: "test"}
}

// delivery is one request a receiver got.
type delivery struct {
	eventID, event, attempt, agent string
	payload                        Payload
	body                           []byte
	status                         int // what the receiver answered
}

// receiver is a real HTTP server on loopback that checks every request's
// signature and answers what answer says (200 when nil).
type receiver struct {
	t      *testing.T
	srv    *httptest.Server
	secret string

	mu       sync.Mutex
	all      []delivery // every request, in the order they came
	answer   func(d delivery) int
	inflight map[string]int // event ID or key → requests under way
	overlap  []string       // what arrived while the same event or key was under way
	hold     func(r *http.Request)
}

func newReceiver(t *testing.T) *receiver {
	rc := &receiver{t: t, secret: NewSecret(), inflight: map[string]int{}}
	rc.srv = httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if err := Verify(r.Header.Get(SignatureHeader), r.Header.Get(EventIDHeader), rc.secret, body, time.Now(), DefaultTolerance); err != nil {
		rc.t.Errorf("a request with a bad signature: %v (header %q)", err, r.Header.Get(SignatureHeader))
	}
	d := delivery{eventID: r.Header.Get(EventIDHeader), event: r.Header.Get(EventHeader), attempt: r.Header.Get(AttemptHeader),
		agent: r.Header.Get("User-Agent"), body: body}
	_ = json.Unmarshal(body, &d.payload)
	key := ""
	if d.payload.Job != nil {
		key = d.payload.Job.ID
	}
	rc.mu.Lock()
	for _, k := range []string{d.eventID, key} {
		if k != "" && rc.inflight[k] > 0 {
			rc.overlap = append(rc.overlap, k)
		}
		rc.inflight[k]++
	}
	hold := rc.hold
	rc.mu.Unlock()
	if hold != nil {
		hold(r)
	}
	rc.mu.Lock()
	d.status = http.StatusNoContent
	if r.Context().Err() != nil {
		d.status = 499 // the sender is gone: nobody reads the answer
	} else if rc.answer != nil {
		d.status = rc.answer(d)
	}
	rc.all = append(rc.all, d)
	for _, k := range []string{d.eventID, key} {
		rc.inflight[k]--
	}
	rc.mu.Unlock()
	w.WriteHeader(d.status)
}

// accepted lists the requests answered 2xx, in order.
func (rc *receiver) accepted() []delivery {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []delivery
	for _, d := range rc.all {
		if d.status < 300 {
			out = append(out, d)
		}
	}
	return out
}

func (rc *receiver) requests() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.all)
}

// start runs a Service on st until the test ends.
func start(t *testing.T, st store.Store, opt Options) *Service {
	t.Helper()
	s := New(st, opt, slog.New(slog.DiscardHandler))
	run(t, s)
	return s
}

func run(t *testing.T, s *Service) context.CancelFunc {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return func() { cancel(); <-done }
}

func subscribe(t *testing.T, s *Service, rc *receiver, name string, events ...string) store.Webhook {
	t.Helper()
	w, err := s.Create(t.Context(), spec.CreateRequest{Name: name, URL: rc.srv.URL + "/hook", Events: events, Secret: rc.secret}, "admin:t", "")
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// runJob takes a job through its life: queued, started, completed.
func runJob(t *testing.T, st store.Store, workerID string) string {
	t.Helper()
	ctx := t.Context()
	j, err := st.InsertJob(ctx, store.Job{ConfigName: "cfg", GPUCount: 0, MaxRetries: 1, SubmittedBy: "admin:t"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.ClaimJob(ctx, store.ClaimRequest{WorkerID: workerID, JobID: j.ID, AckDeadline: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	for _, step := range []lifecycle.Step{
		{To: protocol.JobRunning, By: lifecycle.Report, Ack: true},
		{To: protocol.JobCompleted, By: lifecycle.Report, EndAttempt: protocol.OutcomeCompleted},
	} {
		cur, err := st.GetJob(ctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.TransitionJob(ctx, store.JobTransition{JobID: j.ID, ExpectAttempt: cur.Attempt, From: cur.Status, Step: step}); err != nil {
			t.Fatal(err)
		}
	}
	return j.ID
}

func newWorker(t *testing.T, st store.Store) store.Worker {
	t.Helper()
	w := store.Worker{ID: protocol.NewWorkerID(), Name: "gpu-1", Type: protocol.Persistent, Status: protocol.WorkerIdle,
		Protocol: 2, GPUInfo: store.ReadGPUInfo(json.RawMessage(`{"count":4}`)), Capabilities: protocol.Capabilities{MaxJobs: 4}}
	if err := st.CreateWorker(t.Context(), w, protocol.NewRequestID(), nil); err != nil {
		t.Fatal(err)
	}
	return w
}

// byJob groups accepted deliveries' events by job, in the order accepted.
func byJob(ds []delivery) map[string][]string {
	out := map[string][]string{}
	for _, d := range ds {
		if d.payload.Job != nil {
			out[d.payload.Job.ID] = append(out[d.payload.Job.ID], d.event)
		}
	}
	return out
}

func onceEach(t *testing.T, ds []delivery) {
	t.Helper()
	seen := map[string]bool{}
	for _, d := range ds {
		if seen[d.eventID] {
			t.Fatalf("event %s (%s) accepted twice", d.eventID, d.event)
		}
		seen[d.eventID] = true
		if d.payload.ID != d.eventID || d.payload.Type != d.event {
			t.Fatalf("headers %s %s, payload %s %s", d.eventID, d.event, d.payload.ID, d.payload.Type)
		}
	}
}

func allDelivered(t *testing.T, st store.Store) func() bool {
	return func() bool {
		c, err := st.CountWebhookDeliveries(t.Context(), "")
		if err != nil {
			t.Fatal(err)
		}
		return len(c) == 0
	}
}

var life = []string{spec.JobQueued, spec.JobStarted, spec.JobCompleted}

// Every event of a job's life, and the fleet's, arrives once, signed, with
// the job's events in order.
func TestEveryEventOnceSigned(t *testing.T) {
	t.Parallel()
	storetest.ForEach(t, func(t *testing.T, open storetest.Opener) {
		st := open(t)
		svc := start(t, st, fast())
		rc := newReceiver(t)
		subscribe(t, svc, rc, "all", "*")
		w := newWorker(t, st)
		var jobs []string
		for range 3 {
			jobs = append(jobs, runJob(t, st, w.ID))
		}
		for _, status := range []protocol.WorkerStatus{protocol.WorkerOffline, protocol.WorkerIdle} {
			if _, err := st.UpdateWorker(t.Context(), w.ID, func(cur *store.Worker) (*audit.Record, error) {
				cur.Status = status
				if status == protocol.WorkerIdle {
					cur.GPUConditions = []protocol.GPUCondition{{Index: 2, State: protocol.GPUUnhealthy, Reason: "XID 79"}}
				}
				return nil, nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		want := 3*len(life) + 3
		testutil.Eventually(t, 90*time.Second, "every event", func() bool { return len(rc.accepted()) >= want })
		testutil.Eventually(t, 90*time.Second, "every delivery recorded", allDelivered(t, st))
		got := rc.accepted()
		if len(got) != want || rc.requests() != want {
			t.Fatalf("%d accepted of %d requests, want %d", len(got), rc.requests(), want)
		}
		onceEach(t, got)
		for _, id := range jobs {
			if ev := byJob(got)[id]; !slices.Equal(ev, life) {
				t.Fatalf("job %s: events %v, want %v", id, ev, life)
			}
		}
		var fleet []string
		for _, d := range got {
			if d.payload.Worker != nil {
				fleet = append(fleet, d.event)
				if d.payload.Worker.ID != w.ID || d.attempt != "1" {
					t.Fatalf("fleet event %+v", d)
				}
			}
		}
		if !slices.Equal(fleet, []string{spec.WorkerOffline, spec.WorkerOnline, spec.GPUUnhealthy}) {
			t.Fatalf("fleet events %v", fleet)
		}
		ds, err := svc.Deliveries(t.Context(), "all", store.DeliveryFilter{}, false)
		if err != nil || len(ds) != want || ds[0].State != store.DeliveryDelivered || ds[0].Attempts != 1 || ds[0].LastStatus != 204 {
			t.Fatalf("delivery log: %v %+v", err, ds)
		}
	})
}

// The receiver is down (503) until every job's first event has been tried
// again and again; then it is up, and everything arrives, in order per job.
func TestReceiverDownThenUp(t *testing.T) {
	t.Parallel()
	storetest.ForEach(t, func(t *testing.T, open storetest.Opener) {
		st := open(t)
		rc := newReceiver(t)
		down := true
		tries := map[string]int{}
		rc.answer = func(d delivery) int {
			if down {
				tries[d.eventID]++
				return http.StatusServiceUnavailable
			}
			return http.StatusOK
		}
		svc := start(t, st, fast())
		subscribe(t, svc, rc, "all", "job.*")
		w := newWorker(t, st)
		var jobs []string
		for range 4 {
			jobs = append(jobs, runJob(t, st, w.ID))
		}
		testutil.Eventually(t, 90*time.Second, "each job's first event tried thrice while down", func() bool {
			rc.mu.Lock()
			defer rc.mu.Unlock()
			n := 0
			for _, c := range tries {
				if c >= 3 {
					n++
				}
			}
			// Only the head of each job's events is ever tried: the
			// events behind it wait.
			if len(tries) > len(jobs) {
				t.Errorf("%d events tried while down, want only the %d heads", len(tries), len(jobs))
			}
			return n == len(jobs)
		})
		rc.mu.Lock()
		down = false
		rc.mu.Unlock()
		want := len(jobs) * len(life)
		testutil.Eventually(t, 90*time.Second, "every event after the receiver came back", func() bool { return len(rc.accepted()) >= want })
		testutil.Eventually(t, 90*time.Second, "every delivery recorded", allDelivered(t, st))
		got := rc.accepted()
		onceEach(t, got)
		if len(got) != want {
			t.Fatalf("%d accepted, want %d", len(got), want)
		}
		for _, id := range jobs {
			if ev := byJob(got)[id]; !slices.Equal(ev, life) {
				t.Fatalf("job %s: events %v, want %v", id, ev, life)
			}
		}
		for _, d := range got {
			if d.event == spec.JobQueued && d.attempt == "1" {
				t.Fatalf("a head delivered at its first attempt, though the receiver was down: %+v", d)
			}
		}
	})
}

func TestGiveUp(t *testing.T) {
	t.Parallel()
	st := storetest.Open(t, "sqlite")
	rc := newReceiver(t)
	rc.answer = func(delivery) int { return http.StatusInternalServerError }
	opt := fast()
	opt.RetryFor = 300 * time.Millisecond
	svc := start(t, st, opt)
	wh := subscribe(t, svc, rc, "all", "job.queued", "job.started")
	w := newWorker(t, st)
	runJob(t, st, w.ID)
	testutil.Eventually(t, 90*time.Second, "both deliveries given up", func() bool {
		c, err := st.CountWebhookDeliveries(t.Context(), wh.ID)
		return err == nil && c[store.DeliveryFailed] == 2 && c[store.DeliveryPending] == 0
	})
	ds, err := svc.Deliveries(t.Context(), wh.ID, store.DeliveryFilter{State: store.DeliveryFailed}, true)
	if err != nil || len(ds) != 2 {
		t.Fatalf("%v %+v", err, ds)
	}
	for _, d := range ds {
		if d.LastStatus != 500 || d.LastError != "HTTP 500, a body of 0 bytes" || d.Attempts < 1 || d.EndedAt == "" || len(d.Payload) == 0 {
			t.Fatalf("given up: %+v", d)
		}
	}
	if svc.m.givenUp.Load() != 2 || svc.m.failures.Load() < 2 || svc.m.delivered.Load() != 0 {
		t.Fatalf("metrics %d given up, %d failures, %d delivered", svc.m.givenUp.Load(), svc.m.failures.Load(), svc.m.delivered.Load())
	}
	var b strings.Builder
	svc.WriteMetrics(t.Context(), &b)
	for _, line := range []string{"simpletuner_webhook_deliveries_given_up_total 2", "simpletuner_webhook_deliveries_failed 2",
		"simpletuner_webhook_deliveries_pending 0"} {
		if !strings.Contains(b.String(), line) {
			t.Fatalf("metrics lack %q:\n%s", line, b.String())
		}
	}
}

// By default nothing reaches loopback: not a URL naming it, not a name
// resolving to it. Redirects are never followed.
func TestGuardAndRedirects(t *testing.T) {
	t.Parallel()
	st := storetest.Open(t, "sqlite")
	rc := newReceiver(t)
	opt := fast()
	opt.Guard = spec.Guard{}
	svc := start(t, st, opt)
	_, err := svc.Create(t.Context(), spec.CreateRequest{Name: "ip", URL: rc.srv.URL, Events: []string{"*"}}, "admin:t", "")
	if fe, ok := errors.AsType[*FieldError](err); !ok || fe.Field != "url" || !strings.Contains(fe.Msg, "loopback") {
		t.Fatalf("a loopback URL: %v", err)
	}
	u, _ := url.Parse(rc.srv.URL)
	byName, err := svc.Create(t.Context(), spec.CreateRequest{Name: "name", URL: "http://localhost:" + u.Port() + "/", Events: []string{"*"}},
		"admin:t", "")
	if err != nil {
		t.Fatal(err)
	}
	newWorker(t, st)
	if _, err := st.InsertJob(t.Context(), store.Job{ConfigName: "c"}, nil); err != nil {
		t.Fatal(err)
	}
	var d []spec.Delivery
	testutil.Eventually(t, 90*time.Second, "a failed attempt", func() bool {
		d, err = svc.Deliveries(t.Context(), byName.ID, store.DeliveryFilter{}, false)
		return err == nil && len(d) == 1 && d[0].Attempts > 0
	})
	if !strings.Contains(d[0].LastError, "refused: it is a loopback address") || d[0].LastStatus != 0 {
		t.Fatalf("last error %q", d[0].LastError)
	}
	if rc.requests() != 0 {
		t.Fatal("the receiver was reached")
	}

	// A receiver that redirects: the target is never asked.
	st2 := storetest.Open(t, "sqlite")
	svc2 := start(t, st2, fast())
	target := newReceiver(t)
	redir := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.srv.URL+"/elsewhere?token=x", http.StatusTemporaryRedirect)
	}))
	t.Cleanup(redir.Close)
	wh, err := svc2.Create(t.Context(), spec.CreateRequest{Name: "redir", URL: redir.URL, Events: []string{"*"}}, "admin:t", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st2.InsertJob(t.Context(), store.Job{ConfigName: "c"}, nil); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 90*time.Second, "a failed attempt", func() bool {
		d, err = svc2.Deliveries(t.Context(), wh.ID, store.DeliveryFilter{}, false)
		return err == nil && len(d) == 1 && d[0].Attempts > 0
	})
	if d[0].LastStatus != 307 || !strings.Contains(d[0].LastError, "redirects are not followed") || strings.Contains(d[0].LastError, "token") {
		t.Fatalf("redirect: %+v", d[0])
	}
	if target.requests() != 0 {
		t.Fatal("the redirect was followed")
	}
}

// A receiver that does not answer in time costs one timeout; the delivery
// is retried.
func TestSlowReceiver(t *testing.T) {
	t.Parallel()
	st := storetest.Open(t, "sqlite")
	rc := newReceiver(t)
	first := true
	rc.hold = func(r *http.Request) {
		rc.mu.Lock()
		wait := first
		first = false
		rc.mu.Unlock()
		if wait {
			<-r.Context().Done() // until the sender gives up on it
		}
	}
	opt := fast()
	opt.Timeout = 300 * time.Millisecond
	svc := start(t, st, opt)
	wh := subscribe(t, svc, rc, "all", "job.queued")
	if _, err := st.InsertJob(t.Context(), store.Job{ConfigName: "c"}, nil); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 90*time.Second, "the delivery", allDelivered(t, st))
	d, err := svc.Deliveries(t.Context(), wh.ID, store.DeliveryFilter{}, false)
	if err != nil || len(d) != 1 || d[0].Attempts != 2 || d[0].State != store.DeliveryDelivered {
		t.Fatalf("%v %+v", err, d)
	}
	if n := svc.m.failures.Load(); n != 1 {
		t.Fatalf("%d failures, want the one timeout", n)
	}
}

// An orchestrator that stops mid-request leaves the delivery due at once;
// the next one delivers it, with the same event ID.
func TestStopMidRequest(t *testing.T) {
	t.Parallel()
	st := storetest.Open(t, "sqlite")
	rc := newReceiver(t)
	arrived := make(chan struct{}, 1)
	first := true
	rc.hold = func(r *http.Request) {
		rc.mu.Lock()
		wait := first
		first = false
		rc.mu.Unlock()
		if wait {
			arrived <- struct{}{}
			<-r.Context().Done()
		}
	}
	svc := New(st, fast(), slog.New(slog.DiscardHandler))
	stop := run(t, svc)
	wh := subscribe(t, svc, rc, "all", "job.queued")
	if _, err := st.InsertJob(t.Context(), store.Job{ConfigName: "c"}, nil); err != nil {
		t.Fatal(err)
	}
	<-arrived
	stop()
	d, err := svc.Deliveries(t.Context(), wh.ID, store.DeliveryFilter{}, false)
	if err != nil || len(d) != 1 || d[0].State != store.DeliveryPending || d[0].Attempts != 1 {
		t.Fatalf("after the stop: %v %+v", err, d)
	}
	start(t, st, fast())
	testutil.Eventually(t, 90*time.Second, "the delivery by the next orchestrator", func() bool { return len(rc.accepted()) == 1 })
	acc := rc.accepted()
	testutil.Eventually(t, 90*time.Second, "the interrupted request's end", func() bool { return rc.requests() == 2 })
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if acc[0].attempt != "2" || rc.all[0].eventID != rc.all[1].eventID {
		t.Fatalf("accepted attempt %s; requests for %s and %s", acc[0].attempt, rc.all[0].eventID, rc.all[1].eventID)
	}
}

// Two orchestrators on one PostgreSQL database never send one event, or
// two events of one job, at once; each event is accepted once.
func TestTwoSendersNeverAtOnce(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.Start(t)
	var sts []store.Store
	for range 2 {
		st, err := postgres.Open(context.Background(), dbURL, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		sts = append(sts, st)
	}
	rc := newReceiver(t)
	rc.hold = func(*http.Request) { time.Sleep(2 * time.Millisecond) } // widen the window for a second sender
	var svcs []*Service
	for i, st := range sts {
		opt := fast()
		opt.InstanceID, opt.UserAgent = fmt.Sprintf("replica-%d", i), fmt.Sprintf("replica-%d", i)
		svcs = append(svcs, start(t, st, opt))
	}
	subscribe(t, svcs[0], rc, "all", "*")
	const jobs, perJob = 8, 6
	var wg sync.WaitGroup
	for k := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := sts[k%2]
			for i := range perJob {
				j := store.Job{ID: "j_" + strconv.Itoa(k), ConfigName: "c"}
				e := event(Payload{Type: spec.JobQueued, Job: jobInfo(j, "")}, JobKey(j.ID), spec.DefaultTeam, time.Now())
				e.Payload, _ = json.Marshal(Payload{ID: e.ID, Type: e.Type, Job: &JobInfo{ID: j.ID, Attempt: i}})
				if err := st.EmitEvents(context.Background(), []store.OutboxEvent{e}); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	testutil.Eventually(t, 90*time.Second, "every event", func() bool { return len(rc.accepted()) >= jobs*perJob })
	testutil.Eventually(t, 90*time.Second, "every delivery recorded", allDelivered(t, sts[0]))
	got := rc.accepted()
	onceEach(t, got)
	if len(got) != jobs*perJob {
		t.Fatalf("%d accepted, want %d", len(got), jobs*perJob)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.overlap) > 0 {
		t.Fatalf("events or jobs delivered twice at once: %v", rc.overlap)
	}
	per := map[string][]int{}
	agents := map[string]int{}
	for _, d := range got {
		per[d.payload.Job.ID] = append(per[d.payload.Job.ID], d.payload.Job.Attempt)
		agents[d.agent]++
	}
	for id, seq := range per {
		if !slices.IsSorted(seq) {
			t.Fatalf("job %s: events out of order: %v", id, seq)
		}
	}
	t.Logf("requests by replica: %v", agents)
}

// [[webhooks]] of the configuration are stored at start and after a
// reload; the API cannot delete them.
func TestConfigSubscriptions(t *testing.T) {
	t.Parallel()
	st := storetest.Open(t, "sqlite")
	rc := newReceiver(t)
	opt := fast()
	opt.Subscriptions = []store.Webhook{{Name: "cfg", URL: rc.srv.URL, Events: []string{"job.queued"}, Format: spec.FormatSlack,
		Secret: rc.secret, Source: store.WebhookFromConfig, CreatedBy: "config"}}
	svc := start(t, st, opt)
	testutil.Eventually(t, 90*time.Second, "the entry stored", func() bool { _, err := st.GetWebhook(t.Context(), "cfg"); return err == nil })
	if _, err := svc.Delete(t.Context(), "cfg", "admin:t", ""); !errors.Is(err, ErrFromConfig) {
		t.Fatalf("delete: %v", err)
	}
	if _, err := st.InsertJob(t.Context(), store.Job{ID: "j_cfg", ConfigName: "c"}, nil); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 90*time.Second, "the slack message", func() bool { return len(rc.accepted()) == 1 })
	var body map[string]string
	if err := json.Unmarshal(rc.accepted()[0].body, &body); err != nil || !strings.Contains(body["text"], "Job j_cfg (c) was queued") {
		t.Fatalf("slack body %s: %v", rc.accepted()[0].body, err)
	}
	opt.Subscriptions[0].Events = []string{"*"}
	svc.SetOptions(opt)
	testutil.Eventually(t, 90*time.Second, "the entry changed", func() bool {
		w, err := st.GetWebhook(t.Context(), "cfg")
		return err == nil && slices.Equal(w.Events, []string{"*"})
	})
	opt.Subscriptions = nil
	svc.SetOptions(opt)
	testutil.Eventually(t, 90*time.Second, "the entry removed", func() bool {
		_, err := st.GetWebhook(t.Context(), "cfg")
		return errors.Is(err, store.ErrNotFound)
	})
}

func TestCheck(t *testing.T) {
	t.Parallel()
	svc := New(storetest.Open(t, "sqlite"), fast(), nil)
	for _, tc := range []struct {
		req   spec.CreateRequest
		field string
	}{
		{spec.CreateRequest{Name: "", URL: "https://x.example", Events: []string{"*"}}, "name"},
		{spec.CreateRequest{Name: "a", URL: "file:///etc/passwd", Events: []string{"*"}}, "url"},
		{spec.CreateRequest{Name: "a", URL: "https://x.example"}, "events"},
		{spec.CreateRequest{Name: "a", URL: "https://x.example", Events: []string{"*", "job.done"}}, "events[1]"},
		{spec.CreateRequest{Name: "a", URL: "https://x.example", Events: []string{"*"}, Team: "ml"}, "team"},
		{spec.CreateRequest{Name: "a", URL: "https://x.example", Events: []string{"*"}, Format: "teams"}, "format"},
		{spec.CreateRequest{Name: "a", URL: "https://x.example", Events: []string{"*"}, Secret: "short"}, "secret"},
	} {
		_, err := svc.Check(tc.req)
		if fe, ok := errors.AsType[*FieldError](err); !ok || fe.Field != tc.field {
			t.Errorf("%+v: got %v, want a field error on %q", tc.req, err, tc.field)
		}
	}
	w, err := svc.Check(spec.CreateRequest{Name: "a", URL: "https://x.example", Events: []string{"job.failed", "*", "job.failed"}})
	if err != nil || !strings.HasPrefix(w.Secret, "whsec_") || len(w.Secret) < 40 || w.Format != "json" || !slices.Equal(w.Events, []string{"*", "job.failed"}) {
		t.Fatalf("%v %+v", err, w)
	}
}
