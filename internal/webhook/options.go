package webhook

import (
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/webhook/spec"
)

// Options are the delivery's settings; OptionsFrom fills them from the
// configuration, whose defaults are the only built-in values.
type Options struct {
	Timeout      time.Duration
	RetryFor     time.Duration
	BackoffMin   time.Duration
	BackoffMax   time.Duration
	Concurrency  int
	PollInterval time.Duration
	Keep         time.Duration
	Guard        spec.Guard
	// MaxSubscriptions and MaxPending bound the subscriptions and each
	// one's pending deliveries (store.WebhookLimits).
	MaxSubscriptions int
	MaxPending       int
	// Subscriptions are the [[webhooks]] of the configuration, kept in the
	// store as given (their IDs are the store's).
	Subscriptions []store.Webhook
	// Teams are the teams of [[teams]], which a subscription may name.
	Teams []string
	// InstanceID names this orchestrator in the leases it takes.
	InstanceID string
	// BaseURL is the orchestrator's public URL, which the events' links
	// start with; "" makes them paths.
	BaseURL   string
	UserAgent string
	// PruneEvery is how often finished deliveries past Keep are deleted.
	PruneEvery time.Duration
	// GPUEventWindow is how far apart two gpu.unhealthy events of one GPU
	// are at least (DefaultGPUEventWindow when zero); tests shorten it.
	GPUEventWindow time.Duration
}

// OptionsFrom maps the configuration onto the delivery's settings.
func OptionsFrom(cfg *config.Orchestrator) Options {
	d := cfg.WebhookDelivery
	o := Options{Timeout: d.Timeout.Duration, RetryFor: d.RetryFor.Duration, BackoffMin: d.BackoffMin.Duration,
		BackoffMax: d.BackoffMax.Duration, Concurrency: d.Concurrency, PollInterval: d.PollInterval.Duration,
		Keep: d.Keep.Duration, Guard: d.WebhookGuard(), PruneEvery: cfg.Retention.Interval.Duration,
		MaxSubscriptions: d.MaxSubscriptions, MaxPending: d.MaxPending}
	for _, t := range cfg.Teams {
		o.Teams = append(o.Teams, t.Name)
	}
	for _, w := range cfg.Webhooks {
		format := w.Format
		if format == "" {
			format = spec.FormatJSON
		}
		o.Subscriptions = append(o.Subscriptions, store.Webhook{Name: w.Name, URL: w.URL, Events: w.Events, Team: w.Team,
			Format: format, Secret: w.Secret.Value(), Source: store.WebhookFromConfig, CreatedBy: "config"})
	}
	return o
}

// withDefaults fills what the loop cannot do without from the
// configuration's defaults, for Options built by hand.
func (o Options) withDefaults() Options {
	def := OptionsFrom(config.DefaultOrchestrator())
	for _, d := range []struct{ v, def *time.Duration }{
		{&o.Timeout, &def.Timeout}, {&o.RetryFor, &def.RetryFor}, {&o.BackoffMin, &def.BackoffMin},
		{&o.BackoffMax, &def.BackoffMax}, {&o.PollInterval, &def.PollInterval}, {&o.Keep, &def.Keep},
		{&o.PruneEvery, &def.PruneEvery},
	} {
		if *d.v <= 0 {
			*d.v = *d.def
		}
	}
	if o.Concurrency <= 0 {
		o.Concurrency = def.Concurrency
	}
	if o.MaxSubscriptions <= 0 {
		o.MaxSubscriptions = def.MaxSubscriptions
	}
	if o.MaxPending <= 0 {
		o.MaxPending = def.MaxPending
	}
	o.BackoffMax = max(o.BackoffMax, o.BackoffMin)
	if o.UserAgent == "" {
		o.UserAgent = "simpletuner-orchestratord"
	}
	return o
}

// lease is how long a sender holds a delivery it claimed: longer than any
// request can take, so that no other sender takes it over while its
// request may still be under way.
func (o Options) lease() time.Duration { return 2*o.Timeout + 5*time.Second }
