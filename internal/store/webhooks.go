package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
)

// Webhook is a subscription: the URL events are posted to, which events,
// for which team's jobs, in which format, signed with which secret.
type Webhook struct {
	ID   string
	Name string
	URL  string
	// Events are event names, "*" (all) or a family ("job.*").
	Events []string
	// Team limits job events to that team's jobs; "" takes every team's.
	Team   string
	Format string
	// Secret is the HMAC key the requests are signed with. The receiver
	// needs it too, so it is stored as given; it is shown once, when the
	// subscription is created.
	Secret string
	// Source is WebhookFromAPI or WebhookFromConfig.
	Source    string
	CreatedAt time.Time
	CreatedBy string
	// DroppingSince is set while the subscription drops its events: its
	// receiver let its pending deliveries reach their bound.
	DroppingSince *time.Time
}

// WebhookLimits bound the subscriptions (0: no bound).
type WebhookLimits struct {
	// MaxSubscriptions bounds the subscriptions, whatever their source:
	// every event is written once for each subscription that wants it.
	MaxSubscriptions int
}

// ErrTooManyWebhooks is a subscription beyond WebhookLimits.MaxSubscriptions.
var ErrTooManyWebhooks = errors.New("too many webhook subscriptions")

// Where a subscription was made.
const (
	WebhookFromAPI    = "api"
	WebhookFromConfig = "config"
)

// OutboxEvent is an event for the webhook subscribers, written to the
// outbox in the same transaction as the change it reports, and with it a
// delivery for each subscription that wants it.
type OutboxEvent struct {
	ID   string // unique, "evt_…"; receivers deduplicate on it
	Type string // the event's name, "job.completed"
	// Key orders delivery: a subscription gets the events of one key (a
	// job, a worker) in the order they happened, each after the one before
	// was delivered or given up.
	Key string
	// Team is the team of the job the event is about; "" for fleet events,
	// which go to every subscription that wants them.
	Team    string
	Time    time.Time
	Payload json.RawMessage
}

// Outbox turns the changes the store applies into webhook events. The store
// calls it inside the change's transaction, with the rows as written, and
// writes what it returns there: an event is stored if and only if its
// change is. A transaction may run more than once (see Store), so the
// methods only compute: no side effects, no I/O.
type Outbox interface {
	// JobInserted: a job was submitted.
	JobInserted(j Job) []OutboxEvent
	// JobMoved: a job changed state by t (claims included, as a step to
	// dispatched by lifecycle.Claim).
	JobMoved(before, after Job, t *JobTransition) []OutboxEvent
	// WorkerChanged: a worker row was updated; rec is the audit record
	// written with the change, nil when none.
	WorkerChanged(before, after Worker, rec *audit.Record) []OutboxEvent
	// CheckpointKept: a complete checkpoint of job j was recorded.
	CheckpointKept(j Job, c Checkpoint) []OutboxEvent
	// Committed is called after a transaction that wrote events committed:
	// they may be delivered now.
	Committed()
}

// Delivery states.
const (
	DeliveryPending   = "pending"
	DeliveryDelivered = "delivered"
	DeliveryFailed    = "failed" // given up
)

// WebhookDelivery is one event on its way to one subscription.
type WebhookDelivery struct {
	ID        int64
	WebhookID string
	EventID   string
	EventType string
	Key       string
	EventTime time.Time
	Payload   json.RawMessage
	State     string
	// Attempts is how many requests were made; NextAttempt is when a
	// pending delivery is due.
	Attempts    int
	NextAttempt time.Time
	LastStatus  int // the last answer's HTTP status; 0 when none came
	LastError   string
	CreatedAt   time.Time
	EndedAt     *time.Time
	// Webhook is the subscription (with its secret), filled by claims.
	Webhook Webhook
}

// DeliveryOutcome is how one claimed delivery's request went: Delivered, or
// GiveUp, or else due again at Retry.
type DeliveryOutcome struct {
	ID        int64
	Owner     string // the claimer: the outcome applies only while its lease holds
	Now       time.Time
	Delivered bool
	GiveUp    bool
	Retry     time.Time
	Status    int
	Error     string
}

// DeliveryFilter narrows ListWebhookDeliveries; results are newest first.
type DeliveryFilter struct {
	WebhookID string // "" any
	State     string // "" any
	BeforeID  int64  // only older deliveries than this one; 0 from the newest
	Limit     int
}

// Webhooks is the store's part for webhook subscriptions and their outbox.
type Webhooks interface {
	// SetOutbox installs what turns changes into events (nil: none). Set
	// it before the store is used.
	SetOutbox(o Outbox)
	// SetWebhookLimits sets the bounds on subscriptions and their pending
	// deliveries; they apply from the next write.
	SetWebhookLimits(l WebhookLimits)
	// CreateWebhook stores a subscription; a name in use is ErrDuplicate,
	// one beyond MaxSubscriptions ErrTooManyWebhooks.
	CreateWebhook(ctx context.Context, w Webhook, rec *audit.Record) error
	// WebhookBacklogs counts the pending deliveries of each subscription
	// that has any, by ID.
	WebhookBacklogs(ctx context.Context) (map[string]int, error)
	// SetWebhookDropping starts (since set) or ends (nil) a subscription's
	// dropping: while DroppingSince is set, events make no delivery for
	// it. It reports whether this call changed it, so that among
	// orchestrators sharing the database one alone has each change.
	SetWebhookDropping(ctx context.Context, id string, since *time.Time) (bool, error)
	// GetWebhook reads a subscription by ID or, failing that, by name.
	GetWebhook(ctx context.Context, idOrName string) (Webhook, error)
	ListWebhooks(ctx context.Context) ([]Webhook, error)
	// DeleteWebhook removes a subscription and its deliveries.
	DeleteWebhook(ctx context.Context, id string, rec *audit.Record) error
	// SyncConfigWebhooks makes the subscriptions from the configuration
	// exactly ws, by name, in one transaction: new ones are added, changed
	// ones updated (keeping their ID), others of that source deleted, each
	// with the audit record rec makes ("webhook.create", "webhook.update",
	// "webhook.delete"). A name an API subscription holds is ErrDuplicate.
	SyncConfigWebhooks(ctx context.Context, ws []Webhook, rec func(action string, w Webhook) *audit.Record) error
	// EmitEvents writes events that no other change carries, in a
	// transaction of their own.
	EmitEvents(ctx context.Context, events []OutboxEvent) error
	// ClaimWebhookDeliveries leases up to limit due deliveries to owner
	// until until: pending, due at now, not leased, and each the oldest
	// pending one of its subscription and key. Claimers sharing a database
	// never hold one delivery at once.
	ClaimWebhookDeliveries(ctx context.Context, owner string, now, until time.Time, limit int) ([]WebhookDelivery, error)
	// FinishWebhookDeliveries records claimed deliveries' requests in one
	// transaction. Each outcome whose lease passed to another claimer (or
	// whose delivery was deleted) changes nothing: its error is
	// ErrConflict, the others apply. The error is the transaction's.
	FinishWebhookDeliveries(ctx context.Context, outs []DeliveryOutcome) ([]error, error)
	ListWebhookDeliveries(ctx context.Context, f DeliveryFilter) ([]WebhookDelivery, error)
	// CountWebhookDeliveries counts the pending and the failed deliveries
	// (absent: none) of one subscription, or of all with webhookID "".
	CountWebhookDeliveries(ctx context.Context, webhookID string) (map[string]int, error)
	// PruneWebhookDeliveries deletes up to limit deliveries that ended
	// before cutoff, and the events left without deliveries.
	PruneWebhookDeliveries(ctx context.Context, cutoff time.Time, limit int) (int, error)
}
