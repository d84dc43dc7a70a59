package config

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/webhook/spec"
)

// WebhookDeliveryConfig is [webhook_delivery]: how events reach the
// webhook subscriptions. (The subscriptions themselves are [[webhooks]]; a
// TOML name cannot be both a table and an array of tables.)
type WebhookDeliveryConfig struct {
	// Timeout bounds one request, connecting included.
	Timeout Duration `toml:"timeout"`
	// RetryFor is how long a delivery is retried, counted from its event.
	RetryFor Duration `toml:"retry_for"`
	// BackoffMin and BackoffMax bound the wait before a retry: it doubles
	// from BackoffMin with each failed request, up to BackoffMax, and is
	// jittered.
	BackoffMin Duration `toml:"backoff_min"`
	BackoffMax Duration `toml:"backoff_max"`
	// Concurrency is how many requests one orchestrator has out at once.
	Concurrency int `toml:"concurrency"`
	// PollInterval is how often an orchestrator looks for deliveries due:
	// retries, and events other replicas wrote.
	PollInterval Duration `toml:"poll_interval"`
	// Keep is how long a finished delivery stays in the delivery log.
	Keep Duration `toml:"keep"`
	// AllowLocal lets requests reach loopback, link-local and cloud
	// metadata addresses; AllowNetworks lets them reach these networks
	// only (CIDRs, each optionally with the one port it is open on:
	// "127.0.0.1/32:8080", "[::1]:8443").
	AllowLocal    bool     `toml:"allow_local"`
	AllowNetworks []string `toml:"allow_networks"`
	// MaxSubscriptions bounds the subscriptions, [[webhooks]] entries
	// included: every event is written once for each that wants it, in the
	// transaction of the change it reports.
	MaxSubscriptions int `toml:"max_subscriptions"`
	// MaxPending bounds one subscription's pending deliveries: one whose
	// receiver is away that long drops its events (and says so) until its
	// backlog is down to half.
	MaxPending int `toml:"max_pending"`
}

// WebhookConfig is one [[webhooks]] entry: a subscription kept as the
// configuration says, which the API cannot change or delete.
type WebhookConfig struct {
	Name   string   `toml:"name"`
	URL    string   `toml:"url"`
	Events []string `toml:"events"`
	Team   string   `toml:"team"`
	Format string   `toml:"format"`
	// Secret (or the file SecretFile names) is the HMAC key requests are
	// signed with; the receiver is given the same.
	Secret     Secret `toml:"secret"`
	SecretFile string `toml:"secret_file"`
}

// defaultWebhookDelivery is [webhook_delivery]'s defaults.
func defaultWebhookDelivery() WebhookDeliveryConfig {
	return WebhookDeliveryConfig{
		Timeout:          D(10 * time.Second),
		RetryFor:         D(day),
		BackoffMin:       D(time.Second),
		BackoffMax:       D(10 * time.Minute),
		Concurrency:      8,
		PollInterval:     D(2 * time.Second),
		Keep:             D(30 * day),
		AllowNetworks:    []string{},
		MaxSubscriptions: 50,
		MaxPending:       1000,
	}
}

// WebhookGuard is the address guard [webhook_delivery] describes;
// validation has refused networks that do not parse.
func (c WebhookDeliveryConfig) WebhookGuard() spec.Guard {
	g := spec.Guard{AllowLocal: c.AllowLocal}
	for _, n := range c.AllowNetworks {
		if r, err := spec.ParseAllowRule(n); err == nil {
			g.Allow = append(g.Allow, r)
		}
	}
	return g
}

func (l *loader) validateWebhooks(c *Orchestrator) {
	d := c.WebhookDelivery
	if n := d.Concurrency; n < 1 || n > 1024 {
		l.errf("webhook_delivery.concurrency", "must be from 1 to 1024, got %d", n)
	}
	if d.BackoffMax.Duration < d.BackoffMin.Duration {
		l.errf("webhook_delivery.backoff_max", "must not be shorter than backoff_min (%v)", d.BackoffMin)
	}
	if n := d.MaxSubscriptions; n < 1 || n > 10000 {
		l.errf("webhook_delivery.max_subscriptions", "must be from 1 to 10000, got %d", n)
	}
	if n := d.MaxPending; n < 10 || n > 1000000 {
		l.errf("webhook_delivery.max_pending", "must be from 10 to 1000000, got %d", n)
	}
	if len(c.Webhooks) > d.MaxSubscriptions && d.MaxSubscriptions > 0 {
		l.errf("webhooks", "%d entries, more than webhook_delivery.max_subscriptions (%d)", len(c.Webhooks), d.MaxSubscriptions)
	}
	for i, n := range d.AllowNetworks {
		if _, err := spec.ParseAllowRule(n); err != nil {
			l.errf("webhook_delivery.allow_networks", "entry %d: %v", i+1, err)
		}
	}
	if l.failed["webhooks"] {
		return
	}
	guard := d.WebhookGuard()
	var names, teams []string
	for _, t := range c.Teams {
		teams = append(teams, t.Name)
	}
	for i := range c.Webhooks {
		w := &c.Webhooks[i]
		at := func(format string, args ...any) { l.entryErrf("webhooks", i, format, args...) }
		if err := spec.CheckName(w.Name); err != nil {
			at("name: %v", err)
		} else if slices.Contains(names, w.Name) {
			at("name %q is used by an earlier entry", w.Name)
		}
		names = append(names, w.Name)
		if err := spec.CheckURL(w.URL, guard); err != nil {
			at("url: %v", err)
		}
		if len(w.Events) == 0 {
			at("events: list at least one event, or \"*\"")
		}
		for _, e := range w.Events {
			if err := spec.CheckFilter(e); err != nil {
				at("events: %v", err)
			}
		}
		if err := spec.CheckTeam(w.Team, teams); err != nil {
			at("team: %v", err)
		}
		if w.Format != "" { // "" is json
			if err := spec.CheckFormat(w.Format); err != nil {
				at("format: %v", err)
			}
		}
		l.webhookSecret(w, at)
	}
}

// webhookSecret reads an entry's secret_file into its secret.
func (l *loader) webhookSecret(w *WebhookConfig, at func(string, ...any)) {
	switch {
	case w.Secret != "" && w.SecretFile != "":
		at("set either secret or secret_file, not both")
		return
	case w.SecretFile != "":
		s, err := readSecret(w.SecretFile, false)
		if err != nil {
			at("secret_file: cannot read %s: %v", w.SecretFile, err)
			return
		}
		w.Secret = Secret(s)
	case w.Secret == "":
		at("a secret is required (secret_file, or secret): the receiver checks every request's signature with it")
		return
	}
	if len(w.Secret) < spec.MinSecret {
		at("the secret must be at least %d characters, got %d", spec.MinSecret, len(w.Secret))
	}
}

// redactedURL is the entry's URL as --check-config prints it: its origin,
// and "/<redacted>" where a path or query followed.
func (w WebhookConfig) redactedURL() string {
	origin := spec.Origin(w.URL)
	if rest := strings.TrimPrefix(w.URL, origin); rest != "" && rest != "/" {
		return origin + "/<redacted>"
	}
	return origin
}

// String describes an entry in messages (a reload's changes) without its
// secret or its URL's path, which may hold one (Slack's does).
func (w WebhookConfig) String() string {
	return fmt.Sprintf("%s(url=%s/…, events=%v, team=%q, format=%q)", w.Name, spec.Origin(w.URL), w.Events, w.Team, w.Format)
}
