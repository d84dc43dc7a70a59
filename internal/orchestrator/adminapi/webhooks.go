package adminapi

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/julienschmidt/httprouter"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/web"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/webhook"
	"github.com/simpletuner/simpletuner-orchestration/internal/webhook/spec"
)

// Webhook subscriptions and their delivery logs (scope admin.webhooks). The
// subscriptions, their checks and the delivery live in internal/webhook;
// these methods authorise, call it and map its errors.

// webhookError maps the webhook service's errors onto answers.
func webhookError(err error, idOrName string) error {
	if fe, ok := errors.AsType[*webhook.FieldError](err); ok {
		return web.Invalid("%s", fe.Error())
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		return web.NotFound("webhook subscription not found: %s", idOrName)
	case errors.Is(err, webhook.ErrFromConfig):
		return web.Conflict("webhook subscription %s: %v", idOrName, err)
	case errors.Is(err, webhook.ErrTooMany):
		return web.Conflict("%v", err)
	}
	return err
}

// Webhooks lists the subscriptions and the events one can subscribe to.
func (a *API) Webhooks(ctx context.Context, _ struct{}) (api.WebhookList, error) {
	if _, err := authorize(ctx, auth.ScopeAdminWebhooks); err != nil {
		return api.WebhookList{}, err
	}
	subs, err := a.webhooks.List(ctx)
	if err != nil {
		return api.WebhookList{}, err
	}
	return api.WebhookList{Webhooks: subs, Events: spec.Names()}, nil
}

// CreateWebhook subscribes a receiver; the reply holds its secret, which is
// never shown again.
func (a *API) CreateWebhook(ctx context.Context, req spec.CreateRequest) (spec.Created, error) {
	c, err := authorize(ctx, auth.ScopeAdminWebhooks)
	if err != nil {
		return spec.Created{}, err
	}
	sub, err := a.webhooks.Create(ctx, req, c.Actor(), c.IP)
	if err != nil {
		return spec.Created{}, webhookError(err, req.Name)
	}
	return spec.Created{Subscription: webhook.View(sub, nil), Secret: sub.Secret}, nil
}

func webhookRef(_ http.ResponseWriter, _ *http.Request, ps httprouter.Params) (api.WebhookRef, error) {
	return api.WebhookRef{ID: ps.ByName("id")}, nil
}

// Webhook is one subscription, by id or name.
func (a *API) Webhook(ctx context.Context, ref api.WebhookRef) (spec.Subscription, error) {
	if _, err := authorize(ctx, auth.ScopeAdminWebhooks); err != nil {
		return spec.Subscription{}, err
	}
	sub, err := a.webhooks.Get(ctx, ref.ID)
	if err != nil {
		return spec.Subscription{}, webhookError(err, ref.ID)
	}
	return sub, nil
}

// DeleteWebhook ends a subscription, with its delivery log and the events
// not yet delivered.
func (a *API) DeleteWebhook(ctx context.Context, ref api.WebhookRef) (api.WebhookDeleted, error) {
	c, err := authorize(ctx, auth.ScopeAdminWebhooks)
	if err != nil {
		return api.WebhookDeleted{}, err
	}
	sub, err := a.webhooks.Delete(ctx, ref.ID, c.Actor(), c.IP)
	if err != nil {
		return api.WebhookDeleted{}, webhookError(err, ref.ID)
	}
	return api.WebhookDeleted{Success: true, ID: sub.ID, Name: sub.Name}, nil
}

// deliveriesQuery reads GET /api/admin/webhooks/{id}/deliveries: a page
// (?before= the last id of the previous page), optionally of one state,
// with the events' bodies when ?payload=1.
func deliveriesQuery(_ http.ResponseWriter, r *http.Request, ps httprouter.Params) (api.DeliveriesQuery, error) {
	q := r.URL.Query()
	out := api.DeliveriesQuery{ID: ps.ByName("id"), State: q.Get("state"), Payload: q.Get("payload") == "1"}
	var err error
	if out.Limit, err = queryInt(r, "limit", 50, 1, 500); err != nil {
		return out, err
	}
	if b := q.Get("before"); b != "" {
		if out.Before, err = strconv.ParseInt(b, 10, 64); err != nil || out.Before < 1 {
			return out, web.Invalid("query parameter \"before\" must be a delivery id; got %q", b)
		}
	}
	return out, nil
}

// WebhookDeliveries is a page of a subscription's delivery log, newest
// first.
func (a *API) WebhookDeliveries(ctx context.Context, q api.DeliveriesQuery) (api.DeliveryPage, error) {
	if _, err := authorize(ctx, auth.ScopeAdminWebhooks); err != nil {
		return api.DeliveryPage{}, err
	}
	switch q.State {
	case "", store.DeliveryPending, store.DeliveryDelivered, store.DeliveryFailed:
	default:
		return api.DeliveryPage{}, web.Invalid("query parameter \"state\" must be pending, delivered or failed; got %q", q.State)
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 50
	}
	ds, err := a.webhooks.Deliveries(ctx, q.ID, store.DeliveryFilter{Limit: limit, State: q.State, BeforeID: q.Before}, q.Payload)
	if err != nil {
		return api.DeliveryPage{}, webhookError(err, q.ID)
	}
	page := api.DeliveryPage{Deliveries: ds, Count: len(ds)}
	if len(ds) == limit {
		page.Next = strconv.FormatInt(ds[len(ds)-1].ID, 10)
	}
	return page, nil
}
