package orchestrator

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/julienschmidt/httprouter"

	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/webhook"
	"github.com/simpletuner/simpletuner-orchestration/internal/webhook/spec"
)

// Webhook subscriptions and their delivery logs (scope admin.webhooks). The
// subscriptions, their checks and the delivery live in internal/webhook;
// these handlers decode, call it and encode.

// webhookError maps the webhook service's errors onto answers.
func webhookError(err error, idOrName string) error {
	if fe, ok := errors.AsType[*webhook.FieldError](err); ok {
		return invalid("%s", fe.Error())
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		return notFound("webhook subscription not found: %s", idOrName)
	case errors.Is(err, webhook.ErrFromConfig):
		return conflict("webhook subscription %s: %v", idOrName, err)
	}
	return err
}

func (s *Server) listWebhooks(w http.ResponseWriter, r *http.Request, _ httprouter.Params, _ auth.Principal) error {
	subs, err := s.webhooks.List(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"webhooks": subs, "events": spec.Names()})
	return nil
}

// createWebhook answers POST /api/admin/webhooks: 201 with the subscription
// and its secret, which is never shown again.
func (s *Server) createWebhook(w http.ResponseWriter, r *http.Request, _ httprouter.Params, p auth.Principal) error {
	var req spec.CreateRequest
	if err := s.decodeJSON(w, r, &req); err != nil {
		return err
	}
	sub, err := s.webhooks.Create(r.Context(), req, p.Actor(), peerIP(r))
	if err != nil {
		return webhookError(err, req.Name)
	}
	writeJSON(w, http.StatusCreated, spec.Created{Subscription: webhook.View(sub, nil), Secret: sub.Secret})
	return nil
}

func (s *Server) getWebhook(w http.ResponseWriter, r *http.Request, ps httprouter.Params, _ auth.Principal) error {
	id := ps.ByName("id")
	sub, err := s.webhooks.Get(r.Context(), id)
	if err != nil {
		return webhookError(err, id)
	}
	writeJSON(w, http.StatusOK, sub)
	return nil
}

func (s *Server) deleteWebhook(w http.ResponseWriter, r *http.Request, ps httprouter.Params, p auth.Principal) error {
	id := ps.ByName("id")
	sub, err := s.webhooks.Delete(r.Context(), id, p.Actor(), peerIP(r))
	if err != nil {
		return webhookError(err, id)
	}
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "id": sub.ID, "name": sub.Name})
	return nil
}

// webhookDeliveries answers GET /api/admin/webhooks/{id}/deliveries: the
// delivery log, newest first, a page at a time (?before= the last id of the
// previous page), optionally of one state, with the events' bodies when
// ?payload=1.
func (s *Server) webhookDeliveries(w http.ResponseWriter, r *http.Request, ps httprouter.Params, _ auth.Principal) error {
	id, q := ps.ByName("id"), r.URL.Query()
	limit, err := queryInt(r, "limit", 50, 1, 500)
	if err != nil {
		return err
	}
	f := store.DeliveryFilter{Limit: limit, State: q.Get("state")}
	switch f.State {
	case "", store.DeliveryPending, store.DeliveryDelivered, store.DeliveryFailed:
	default:
		return invalid("query parameter \"state\" must be pending, delivered or failed; got %q", f.State)
	}
	if b := q.Get("before"); b != "" {
		if f.BeforeID, err = strconv.ParseInt(b, 10, 64); err != nil || f.BeforeID < 1 {
			return invalid("query parameter \"before\" must be a delivery id; got %q", b)
		}
	}
	ds, err := s.webhooks.Deliveries(r.Context(), id, f, q.Get("payload") == "1")
	if err != nil {
		return webhookError(err, id)
	}
	reply := map[string]any{"deliveries": ds, "count": len(ds)}
	if len(ds) == limit {
		reply["next"] = strconv.FormatInt(ds[len(ds)-1].ID, 10)
	}
	writeJSON(w, http.StatusOK, reply)
	return nil
}
