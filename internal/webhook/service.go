// Package webhook tells people what happened: it turns job and fleet
// changes into signed webhook events and delivers them at least once.
//
// Events are written by the store in the transaction of the change they
// report (the Emitter is the store's Outbox), with a delivery for each
// subscription that wants them. The Service's loop claims due deliveries
// with a lease, posts them with an HMAC signature, and records each
// outcome: delivered, due again after a jittered back-off, or given up once
// retry_for has passed. It runs apart from the scheduler, so a slow or dead
// receiver delays no job.
package webhook

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/webhook/spec"
)

// Service delivers the outbox's events.
type Service struct {
	st      store.Store
	log     *slog.Logger
	opt     atomic.Pointer[Options]
	client  atomic.Pointer[http.Client]
	emitter *Emitter
	// wake asks the loop to look for deliveries now; resync to store the
	// configuration's subscriptions again.
	wake   chan struct{}
	resync chan struct{}
	claims atomic.Int64
	m      metrics
	// errLog spaces out the log line of a claim that fails (a database
	// that is away fails every look).
	errMu   sync.Mutex
	errLast time.Time
}

// New returns a Service on st and installs its Emitter as st's Outbox:
// from here on the store's changes make events.
func New(st store.Store, opt Options, log *slog.Logger) *Service {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Service{st: st, log: log, wake: make(chan struct{}, 1), resync: make(chan struct{}, 1)}
	s.emitter = NewEmitter(s.Wake)
	s.emitter.SetHeldEventWriter(s.writeHeld)
	s.apply(opt)
	st.SetOutbox(s.emitter)
	return s
}

// SetOptions applies new settings (a reload). Changed [[webhooks]] are
// stored again by the loop.
func (s *Service) SetOptions(opt Options) {
	prev := s.options()
	s.apply(opt)
	if !reflect.DeepEqual(prev.Subscriptions, s.options().Subscriptions) {
		signal(s.resync)
	}
	s.Wake()
}

func (s *Service) apply(opt Options) {
	opt = opt.withDefaults()
	// Kept apart from the caller's, which a reload may change in place.
	opt.Subscriptions = slices.Clone(opt.Subscriptions)
	for i := range opt.Subscriptions {
		opt.Subscriptions[i].Events = slices.Clone(opt.Subscriptions[i].Events)
	}
	old := s.opt.Swap(&opt)
	if old == nil || !reflect.DeepEqual(old.Guard, opt.Guard) || old.Timeout != opt.Timeout {
		if prev := s.client.Swap(newClient(opt.Guard, opt.Timeout)); prev != nil {
			prev.CloseIdleConnections()
		}
	}
	s.emitter.SetBaseURL(opt.BaseURL)
	s.st.SetWebhookLimits(store.WebhookLimits{MaxSubscriptions: opt.MaxSubscriptions})
	s.emitter.SetGPUEventWindow(opt.GPUEventWindow)
}

// writeHeld writes the events the Emitter held back (a GPU's fence at the
// end of its window).
func (s *Service) writeHeld(events []store.OutboxEvent) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.st.EmitEvents(ctx, events); err != nil {
		s.log.Warn("could not write a held webhook event", "type", events[0].Type, "key", events[0].Key, "err", err)
	}
}

func (s *Service) options() Options { return *s.opt.Load() }

// Wake asks the loop to look for due deliveries now; it never blocks.
func (s *Service) Wake() { signal(s.wake) }

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Run delivers until ctx ends: it claims what is due (as many as it has
// room for), sends each in a goroutine of its own and looks again when one
// finishes, when events are written here, or every poll_interval (retries,
// events of other replicas). The outcomes of the requests that finished
// meanwhile are recorded together, in one transaction, before each look.
// In-flight requests are cut when ctx ends and recorded as due at once, for
// the next orchestrator to send.
func (s *Service) Run(ctx context.Context) {
	defer s.emitter.Close()
	s.syncConfig(ctx)
	results := make(chan sent, 64)
	inflight := 0
	var done []sent
	nextPrune := time.Now().Add(s.options().PruneEvery)
	var nextBacklogCheck time.Time
	for {
		s.record(ctx, done)
		inflight -= len(done)
		done = done[:0]
		if ctx.Err() != nil {
			break
		}
		opt := s.options()
		if free := opt.Concurrency - inflight; free > 0 {
			owner := fmt.Sprintf("%s#%d", opt.InstanceID, s.claims.Add(1))
			now := time.Now().UTC()
			ds, err := s.st.ClaimWebhookDeliveries(ctx, owner, now, now.Add(opt.lease()), free)
			if err != nil && ctx.Err() == nil {
				s.logClaimError(err)
			}
			for _, d := range ds {
				inflight++
				go func() { results <- sent{d: d, out: s.deliver(ctx, d, owner)} }()
			}
		}
		if time.Now().After(nextBacklogCheck) {
			s.checkBacklogs(ctx)
			nextBacklogCheck = time.Now().Add(opt.PollInterval)
		}
		if time.Now().After(nextPrune) {
			s.prune(ctx)
			nextPrune = time.Now().Add(opt.PruneEvery)
		}
		t := time.NewTimer(opt.PollInterval)
		select {
		case <-ctx.Done():
		case <-s.wake:
		case r := <-results:
			done = append(done, r)
		case <-s.resync:
			s.syncConfig(ctx)
		case <-t.C:
		}
		t.Stop()
		for more := true; more; {
			select {
			case r := <-results:
				done = append(done, r)
			default:
				more = false
			}
		}
	}
	for ; inflight > 0; inflight-- {
		done = append(done, <-results)
	}
	s.record(ctx, done)
}

// sent is a request that finished, and how.
type sent struct {
	d   store.WebhookDelivery
	out store.DeliveryOutcome
}

func (s *Service) logClaimError(err error) {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	if time.Since(s.errLast) < time.Minute {
		return
	}
	s.errLast = time.Now()
	s.log.Warn("webhooks: cannot look for deliveries due", "err", err)
}

// deliver sends one claimed delivery and says how it went.
func (s *Service) deliver(ctx context.Context, d store.WebhookDelivery, owner string) store.DeliveryOutcome {
	opt := s.options()
	attempt := d.Attempts + 1
	rctx, cancel := context.WithTimeout(ctx, opt.Timeout)
	res := send(rctx, s.client.Load(), d, attempt, opt.UserAgent, time.Now())
	cancel()
	now := time.Now().UTC()
	out := store.DeliveryOutcome{ID: d.ID, Owner: owner, Now: now, Status: res.status, Error: res.err}
	deadline := d.EventTime.Add(opt.RetryFor)
	log := s.logFor(d, attempt)
	switch {
	case res.ok:
		out.Delivered = true
		s.m.delivered.Add(1)
		log.Debug("webhook delivered", "status", res.status)
	case ctx.Err() != nil: // stopping: due at once, for whoever runs next
		out.Retry = now
	case !now.Before(deadline):
		out.GiveUp = true
		s.m.failures.Add(1)
		s.m.givenUp.Add(1)
		log.Warn("webhook delivery given up: retried for webhook_delivery.retry_for", "retry_for", opt.RetryFor, "err", res.err)
	default:
		out.Retry = now.Add(backoff(attempt, opt))
		if out.Retry.After(deadline) { // the last try at the deadline
			out.Retry = deadline
		}
		s.m.failures.Add(1)
		log.Info("webhook delivery failed; it will be retried", "err", res.err, "retry_at", out.Retry)
	}
	return out
}

func (s *Service) logFor(d store.WebhookDelivery, attempt int) *slog.Logger {
	return s.log.With("webhook", d.Webhook.Name, "receiver", originOf(d), "event", d.EventType, "event_id", d.EventID,
		"delivery", d.ID, "attempt", attempt)
}

// record stores the outcomes of finished requests in one transaction. An
// outcome that cannot be stored leaves its delivery leased: when the lease
// runs out it is sent again (at least once).
func (s *Service) record(ctx context.Context, done []sent) {
	if len(done) == 0 {
		return
	}
	outs := make([]store.DeliveryOutcome, len(done))
	for i, r := range done {
		outs[i] = r.out
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	errs, err := s.st.FinishWebhookDeliveries(fctx, outs)
	if err != nil {
		s.log.Warn("webhooks: cannot record the outcome of deliveries; they will be sent again", "deliveries", len(outs), "err", err)
		return
	}
	for i, err := range errs {
		if err != nil {
			s.logFor(done[i].d, done[i].d.Attempts+1).Info("webhook delivery taken over by another sender meanwhile", "err", err)
		}
	}
}

// originOf is the receiver's scheme and host: what logs show of its URL.
func originOf(d store.WebhookDelivery) string { return spec.Origin(d.Webhook.URL) }

// backoff is the wait before retry n (n ≥ 1 requests failed): BackoffMin
// doubled n-1 times, at most BackoffMax, then jittered to half to all of it
// so that receivers coming back are not hit by every retry at once.
func backoff(n int, o Options) time.Duration {
	d := o.BackoffMax
	if n-1 < 40 {
		if b := o.BackoffMin << (n - 1); b > 0 && b < d {
			d = b
		}
	}
	return d/2 + rand.N(d/2+1)
}

// checkBacklogs bounds each subscription's pending deliveries: one whose
// backlog reached MaxPending starts dropping its events (they make no
// delivery for it), one dropping whose backlog is down to half resumes.
// Each change is logged once, by the orchestrator that made it, however
// many events are dropped meanwhile. It runs every PollInterval rather
// than with each event, which keeps a count out of every change's
// transaction; a backlog may pass the bound by the events of one interval.
func (s *Service) checkBacklogs(ctx context.Context) {
	limit := s.options().MaxPending
	backlogs, err := s.st.WebhookBacklogs(ctx)
	var subs []store.Webhook
	if err == nil {
		subs, err = s.st.ListWebhooks(ctx)
	}
	if err != nil {
		if ctx.Err() == nil {
			s.logClaimError(err)
		}
		return
	}
	for _, w := range subs {
		pending := backlogs[w.ID]
		var since *time.Time
		switch {
		case w.DroppingSince == nil && pending >= limit:
			now := time.Now().UTC()
			since = &now
		case w.DroppingSince != nil && pending <= limit/2:
		default:
			continue
		}
		changed, err := s.st.SetWebhookDropping(ctx, w.ID, since)
		if err != nil || !changed {
			continue // a failure is tried again at the next look
		}
		log := s.log.With("webhook", w.Name, "receiver", spec.Origin(w.URL), "pending", pending, "max_pending", limit)
		if since != nil {
			log.Warn("webhook subscription is dropping its events: its receiver has not taken the deliveries pending, " +
				"which reached webhook_delivery.max_pending; it takes events again once they are down to half")
			continue
		}
		log.Info("webhook subscription no longer drops events: its backlog is down to half of webhook_delivery.max_pending")
	}
}

// prune deletes finished deliveries past Keep, a batch at a time.
func (s *Service) prune(ctx context.Context) {
	cutoff := time.Now().Add(-s.options().Keep)
	for ctx.Err() == nil {
		n, err := s.st.PruneWebhookDeliveries(ctx, cutoff, 500)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("webhooks: cannot delete old deliveries", "err", err)
			}
			return
		}
		if n < 500 {
			return
		}
	}
}

// metrics count this orchestrator's requests.
type metrics struct {
	delivered, failures, givenUp atomic.Int64
}

// WriteMetrics writes the delivery's counters and backlog in the
// Prometheus text format.
func (s *Service) WriteMetrics(ctx context.Context, w io.Writer) {
	line := func(kind, name, help string, v int64) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n%s %d\n", name, help, name, kind, name, v)
	}
	line("counter", "simpletuner_webhook_deliveries_total", "Webhook requests a receiver accepted (2xx).", s.m.delivered.Load())
	line("counter", "simpletuner_webhook_delivery_failures_total", "Webhook requests that failed (no answer, refused, or not 2xx).", s.m.failures.Load())
	line("counter", "simpletuner_webhook_deliveries_given_up_total", "Webhook deliveries given up after webhook_delivery.retry_for.", s.m.givenUp.Load())
	if counts, err := s.st.CountWebhookDeliveries(ctx, ""); err == nil {
		line("gauge", "simpletuner_webhook_deliveries_pending", "Webhook deliveries waiting to be sent or retried.", int64(counts[store.DeliveryPending]))
		line("gauge", "simpletuner_webhook_deliveries_failed", "Webhook deliveries given up, still in the delivery log.", int64(counts[store.DeliveryFailed]))
	}
	if subs, err := s.st.ListWebhooks(ctx); err == nil {
		dropping := 0
		for _, w := range subs {
			if w.DroppingSince != nil {
				dropping++
			}
		}
		line("gauge", "simpletuner_webhook_subscriptions_dropping",
			"Webhook subscriptions dropping their events: their pending deliveries reached webhook_delivery.max_pending.", int64(dropping))
	}
}
