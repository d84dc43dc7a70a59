package webhook

import (
	"bytes"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/store/storetest"
	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
	"github.com/simpletuner/simpletuner-orchestration/internal/webhook/spec"
)

// logBuffer collects a Service's log lines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

// A create beyond max_subscriptions is refused, naming the setting, and
// stores nothing.
func TestSubscriptionCap(t *testing.T) {
	t.Parallel()
	st := storetest.Open(t, "sqlite")
	opt := fast()
	opt.MaxSubscriptions = 2
	svc := start(t, st, opt)
	rc := newReceiver(t)
	subscribe(t, svc, rc, "one", "*")
	subscribe(t, svc, rc, "two", "*")
	_, err := svc.Create(t.Context(), spec.CreateRequest{Name: "three", URL: rc.srv.URL, Events: []string{"*"}}, "admin:t", "")
	if !errors.Is(err, ErrTooMany) || !strings.Contains(err.Error(), "at most 2 (webhook_delivery.max_subscriptions)") {
		t.Fatalf("a third subscription: %v", err)
	}
	if subs, err := svc.List(t.Context()); err != nil || len(subs) != 2 {
		t.Fatalf("%d subscriptions, %v", len(subs), err)
	}
}

// A subscription whose receiver takes nothing stops gaining deliveries
// once its backlog reaches max_pending: it drops the events after that,
// shows "dropping", and logs the start and the end of it once each. Once
// its receiver is back and the backlog drained, it takes events again.
func TestPendingBoundDropping(t *testing.T) {
	t.Parallel()
	storetest.ForEach(t, func(t *testing.T, open storetest.Opener) {
		st := open(t)
		var logs logBuffer
		opt := fast()
		opt.MaxPending = 10
		svc := New(st, opt, slog.New(slog.NewTextHandler(&logs, nil)))
		run(t, svc)
		rc := newReceiver(t)
		var mu sync.Mutex
		down := true
		rc.answer = func(delivery) int {
			mu.Lock()
			defer mu.Unlock()
			if down {
				return http.StatusServiceUnavailable
			}
			return http.StatusNoContent
		}
		wh := subscribe(t, svc, rc, "slow", spec.JobQueued)
		insert := func(n int) {
			for range n {
				if _, err := st.InsertJob(t.Context(), store.Job{ConfigName: "c"}, nil); err != nil {
					t.Fatal(err)
				}
			}
		}
		insert(10)
		const started, ended = "webhook subscription is dropping its events", "webhook subscription no longer drops events"
		testutil.Eventually(t, 60*time.Second, "the start of dropping logged", func() bool { return logs.count(started) == 1 })
		insert(5)
		sub, err := svc.Get(t.Context(), wh.ID)
		if err != nil || sub.Pending != 10 || !sub.Dropping || sub.DroppingSince == "" {
			t.Fatalf("after 15 events with max_pending 10: %+v, %v", sub, err)
		}
		var metrics strings.Builder
		svc.WriteMetrics(t.Context(), &metrics)
		if !strings.Contains(metrics.String(), "\nsimpletuner_webhook_subscriptions_dropping 1\n") {
			t.Fatalf("metrics:\n%s", metrics.String())
		}

		mu.Lock()
		down = false
		mu.Unlock()
		testutil.Eventually(t, 60*time.Second, "the backlog delivered", allDelivered(t, st))
		testutil.Eventually(t, 60*time.Second, "the end of dropping logged", func() bool { return logs.count(ended) == 1 })
		if sub, err = svc.Get(t.Context(), wh.ID); err != nil || sub.Dropping || sub.DroppingSince != "" {
			t.Fatalf("after the backlog was delivered: %+v, %v", sub, err)
		}
		insert(1)
		testutil.Eventually(t, 60*time.Second, "a new event delivered", func() bool { return len(rc.accepted()) == 11 })
		if n := logs.count(started); n != 1 {
			t.Fatalf("the start of dropping logged %d times", n)
		}
		ds, err := svc.Deliveries(t.Context(), wh.ID, store.DeliveryFilter{}, false)
		if err != nil || len(ds) != 11 {
			t.Fatalf("%d deliveries for 16 events, 5 dropped: %v", len(ds), err)
		}
	})
}
