package spec

import "encoding/json"

// CreateRequest is the body of POST /api/admin/webhooks.
type CreateRequest struct {
	Name   string   `json:"name"`
	URL    string   `json:"url"`
	Events []string `json:"events"`
	Team   string   `json:"team,omitempty"`
	Format string   `json:"format,omitempty"` // "" is json
	// Secret is optional: without it the orchestrator makes one. Either
	// way the reply shows it, once.
	Secret string `json:"secret,omitempty"`
}

// Subscription is a subscription as the API shows it: never its secret.
type Subscription struct {
	ID        string   `json:"id"`
	Name      string   `json:"name"`
	URL       string   `json:"url"`
	Events    []string `json:"events"`
	Team      string   `json:"team"`
	Format    string   `json:"format"`
	Source    string   `json:"source"` // "api" or "config"
	CreatedAt string   `json:"created_at"`
	CreatedBy string   `json:"created_by,omitempty"`
	// Pending and Failed count its deliveries in those states (lists only).
	Pending int `json:"pending"`
	Failed  int `json:"failed"`
	// Dropping is true while the subscription drops its events: its
	// pending deliveries reached webhook_delivery.max_pending, and it takes
	// new events again once they are down to half. DroppingSince is when
	// it started.
	Dropping      bool   `json:"dropping"`
	DroppingSince string `json:"dropping_since,omitempty"`
}

// Created is the reply to a create: the subscription and its secret, shown
// this once.
type Created struct {
	Subscription
	Secret string `json:"secret"`
}

// Delivery is one event on its way to one subscription, as the delivery log
// shows it.
type Delivery struct {
	ID          int64           `json:"id"`
	WebhookID   string          `json:"webhook_id"`
	EventID     string          `json:"event_id"`
	Event       string          `json:"event"`
	Key         string          `json:"key"`
	EventTime   string          `json:"event_time"`
	State       string          `json:"state"` // pending, delivered, failed (given up)
	Attempts    int             `json:"attempts"`
	NextAttempt string          `json:"next_attempt,omitempty"` // pending only
	LastStatus  int             `json:"last_status,omitempty"`
	LastError   string          `json:"last_error,omitempty"`
	EndedAt     string          `json:"ended_at,omitempty"`
	Payload     json.RawMessage `json:"payload,omitempty"`
}
