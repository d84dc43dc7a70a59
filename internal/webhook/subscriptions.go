package webhook

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/webhook/spec"
)

// FieldError is a request field that is wrong: the API answers 422 naming
// it.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return fmt.Sprintf("field %q: %s", e.Field, e.Msg) }

// ErrFromConfig: a subscription kept in the configuration, which only the
// configuration changes.
var ErrFromConfig = errors.New("the subscription is a [[webhooks]] entry of orchestratord.toml: change it there")

// ErrTooMany: the subscriptions are at webhook_delivery.max_subscriptions.
var ErrTooMany = errors.New("no more webhook subscriptions can be made")

// MinSecret is the shortest secret a subscription may have.
const MinSecret = spec.MinSecret

// NewSecret returns a fresh secret: "whsec_" and 32 random bytes.
func NewSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand never fails
	return "whsec_" + base64.RawURLEncoding.EncodeToString(b)
}

// NewID returns a subscription's ID: "wh_" and 12 random characters.
func NewID() string { return "wh_" + NewEventID()[4:16] }

// Check validates a create request against the guard in force and returns
// the subscription it asks for (secret included), or a *FieldError.
func (s *Service) Check(req spec.CreateRequest) (store.Webhook, error) {
	fe := func(field string, err error) error { return &FieldError{Field: field, Msg: err.Error()} }
	name := strings.TrimSpace(req.Name)
	if err := spec.CheckName(name); err != nil {
		return store.Webhook{}, fe("name", err)
	}
	if err := spec.CheckURL(req.URL, s.options().Guard); err != nil {
		return store.Webhook{}, fe("url", err)
	}
	if len(req.Events) == 0 {
		return store.Webhook{}, fe("events", errors.New("list at least one event, or \"*\""))
	}
	for i, e := range req.Events {
		if err := spec.CheckFilter(e); err != nil {
			return store.Webhook{}, fe(fmt.Sprintf("events[%d]", i), err)
		}
	}
	if err := spec.CheckTeam(req.Team, s.options().Teams); err != nil {
		return store.Webhook{}, fe("team", err)
	}
	format := req.Format
	if format == "" {
		format = spec.FormatJSON
	}
	if err := spec.CheckFormat(format); err != nil {
		return store.Webhook{}, fe("format", err)
	}
	secret := req.Secret
	switch {
	case secret == "":
		secret = NewSecret()
	case len(secret) < MinSecret:
		return store.Webhook{}, fe("secret", fmt.Errorf("at least %d characters (or leave it out for one made here)", MinSecret))
	}
	events := slices.Clone(req.Events)
	slices.Sort(events)
	return store.Webhook{ID: NewID(), Name: name, URL: req.URL, Events: slices.Compact(events), Team: req.Team,
		Format: format, Secret: secret, Source: store.WebhookFromAPI, CreatedAt: time.Now().UTC()}, nil
}

// details is what an audit record says of a subscription: never its secret,
// and of its URL only the origin (a path may hold a secret).
func details(w store.Webhook) map[string]any {
	return map[string]any{"name": w.Name, "receiver": spec.Origin(w.URL), "events": w.Events, "team": w.Team,
		"format": w.Format, "source": w.Source}
}

// Create checks and stores a subscription made by actor, audited; the
// secret in what it returns is shown to the caller once.
func (s *Service) Create(ctx context.Context, req spec.CreateRequest, actor, ip string) (store.Webhook, error) {
	w, err := s.Check(req)
	if err != nil {
		return w, err
	}
	w.CreatedBy = actor
	rec := audit.New(actor, ip, "webhook.create", "webhook", w.ID, audit.Success, details(w))
	if err := s.st.CreateWebhook(ctx, w, &rec); err != nil {
		switch {
		case errors.Is(err, store.ErrDuplicate):
			return w, &FieldError{Field: "name", Msg: fmt.Sprintf("a subscription named %q exists", w.Name)}
		case errors.Is(err, store.ErrTooManyWebhooks):
			return w, fmt.Errorf("%w: at most %d (webhook_delivery.max_subscriptions); delete one first",
				ErrTooMany, s.options().MaxSubscriptions)
		}
		return w, err
	}
	s.log.Info("webhook subscription created", "webhook", w.Name, "id", w.ID, "receiver", spec.Origin(w.URL), "by", actor)
	return w, nil
}

// Delete removes a subscription made through the API (by ID or name), with
// its delivery log.
func (s *Service) Delete(ctx context.Context, idOrName, actor, ip string) (store.Webhook, error) {
	w, err := s.st.GetWebhook(ctx, idOrName)
	if err != nil {
		return w, err
	}
	if w.Source == store.WebhookFromConfig {
		return w, ErrFromConfig
	}
	rec := audit.New(actor, ip, "webhook.delete", "webhook", w.ID, audit.Success, details(w))
	if err := s.st.DeleteWebhook(ctx, w.ID, &rec); err != nil {
		return w, err
	}
	s.log.Info("webhook subscription deleted", "webhook", w.Name, "id", w.ID, "by", actor)
	return w, nil
}

// View is a subscription as the API shows it; counts adds its pending and
// failed deliveries.
func View(w store.Webhook, counts map[string]int) spec.Subscription {
	return spec.Subscription{ID: w.ID, Name: w.Name, URL: w.URL, Events: w.Events, Team: w.Team, Format: w.Format,
		Source: w.Source, CreatedAt: stamp(w.CreatedAt), CreatedBy: w.CreatedBy,
		Pending: counts[store.DeliveryPending], Failed: counts[store.DeliveryFailed],
		Dropping: w.DroppingSince != nil, DroppingSince: stampPtr(w.DroppingSince)}
}

// List returns every subscription with its delivery counts.
func (s *Service) List(ctx context.Context) ([]spec.Subscription, error) {
	ws, err := s.st.ListWebhooks(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]spec.Subscription, 0, len(ws))
	for _, w := range ws {
		counts, err := s.st.CountWebhookDeliveries(ctx, w.ID)
		if err != nil {
			return nil, err
		}
		out = append(out, View(w, counts))
	}
	return out, nil
}

// Get returns one subscription (by ID or name) with its delivery counts.
func (s *Service) Get(ctx context.Context, idOrName string) (spec.Subscription, error) {
	w, err := s.st.GetWebhook(ctx, idOrName)
	if err != nil {
		return spec.Subscription{}, err
	}
	counts, err := s.st.CountWebhookDeliveries(ctx, w.ID)
	return View(w, counts), err
}

// DeliveryView is a delivery as the delivery log shows it.
func DeliveryView(d store.WebhookDelivery, payload bool) spec.Delivery {
	v := spec.Delivery{ID: d.ID, WebhookID: d.WebhookID, EventID: d.EventID, Event: d.EventType, Key: d.Key,
		EventTime: stamp(d.EventTime), State: d.State, Attempts: d.Attempts, LastStatus: d.LastStatus,
		LastError: d.LastError, EndedAt: stampPtr(d.EndedAt)}
	if d.State == store.DeliveryPending {
		v.NextAttempt = stamp(d.NextAttempt)
	}
	if payload {
		v.Payload = d.Payload
	}
	return v
}

// Deliveries returns a page of a subscription's delivery log, newest first.
func (s *Service) Deliveries(ctx context.Context, idOrName string, f store.DeliveryFilter, payload bool) ([]spec.Delivery, error) {
	w, err := s.st.GetWebhook(ctx, idOrName)
	if err != nil {
		return nil, err
	}
	f.WebhookID = w.ID
	ds, err := s.st.ListWebhookDeliveries(ctx, f)
	if err != nil {
		return nil, err
	}
	out := make([]spec.Delivery, 0, len(ds))
	for _, d := range ds {
		out = append(out, DeliveryView(d, payload))
	}
	return out, nil
}

// syncConfig stores the configuration's subscriptions. A failure is logged:
// the entries keep their last stored state until the next reload.
func (s *Service) syncConfig(ctx context.Context) {
	subs := slices.Clone(s.options().Subscriptions)
	for i := range subs {
		subs[i].ID, subs[i].CreatedAt = NewID(), time.Now().UTC()
	}
	err := s.st.SyncConfigWebhooks(ctx, subs, func(action string, w store.Webhook) *audit.Record {
		s.log.Info("webhook subscription from the configuration: "+strings.TrimPrefix(action, "webhook."), "webhook", w.Name,
			"receiver", spec.Origin(w.URL))
		rec := audit.New("system", "", action, "webhook", w.ID, audit.Success, details(w))
		return &rec
	})
	if err != nil && ctx.Err() == nil {
		s.log.Error("webhooks: the [[webhooks]] of the configuration could not be stored", "err", err)
	}
}
