package dashboard

import (
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/webhook/spec"
)

// Webhook subscriptions: the list with a form to add one, each one's page
// with its delivery log, and its delete. Everything goes through the admin
// API (scope admin.webhooks).

const deliveriesPerPage = 50

func (d *Dashboard) webhookRoutes(handle func(string, http.HandlerFunc)) {
	handle("GET "+Prefix+"webhooks", d.page(d.webhooks))
	handle("POST "+Prefix+"webhooks", d.action(d.createWebhook))
	handle("GET "+Prefix+"webhooks/{id}", d.page(d.webhook))
	handle("POST "+Prefix+"webhooks/{id}/delete", d.action(d.deleteWebhook))
}

func (d *Dashboard) webhooks(w http.ResponseWriter, r *http.Request, s *session) {
	d.webhooksWithForm(w, r, s, http.StatusOK, newForm())
}

func (d *Dashboard) webhooksWithForm(w http.ResponseWriter, r *http.Request, s *session, status int, f *form) {
	body, err := d.opt.API.Webhooks(d.as(r, s), struct{}{})
	if err != nil {
		d.apiErrorPage(w, r, s, *d.failure(err, "list webhooks"))
		return
	}
	if f.V("format") == "" {
		f.Values["format"] = spec.FormatJSON
	}
	d.render(w, r, status, "webhooks", map[string]any{"Webhooks": body.Webhooks, "Form": f, "Events": spec.Events}, s)
}

// createWebhook subscribes a URL and shows its secret, once.
func (d *Dashboard) createWebhook(w http.ResponseWriter, r *http.Request, s *session) {
	f := formFrom(r, "name", "url", "team", "format", "secret")
	if err := r.ParseForm(); err == nil {
		f.Values["events"] = strings.Join(r.PostForm["events"], ",")
	}
	events := strings.Split(f.V("events"), ",")
	events = slices.DeleteFunc(events, func(e string) bool { return e == "" })
	if strings.TrimSpace(f.V("name")) == "" {
		f.fail("name", "A name is required.")
	}
	if strings.TrimSpace(f.V("url")) == "" {
		f.fail("url", "The receiver's URL is required.")
	}
	if len(events) == 0 {
		f.fail("events", "Pick at least one event.")
	}
	if f.Failed() {
		d.webhooksWithForm(w, r, s, http.StatusUnprocessableEntity, f)
		return
	}
	created, err := d.opt.API.CreateWebhook(d.as(r, s), spec.CreateRequest{Name: strings.TrimSpace(f.V("name")),
		URL: strings.TrimSpace(f.V("url")), Events: events, Team: strings.TrimSpace(f.V("team")), Format: f.V("format"),
		Secret: f.V("secret")})
	if err != nil {
		fail := d.failure(err, "create a webhook")
		f.Values["secret"] = "" // never sent back to the browser
		f.apiError(*fail, nil)
		d.webhooksWithForm(w, r, s, fail.Status, f)
		return
	}
	d.render(w, r, http.StatusCreated, "webhook", map[string]any{"W": created.Subscription, "Secret": created.Secret}, s)
}

// webhook shows a subscription and a page of its delivery log.
func (d *Dashboard) webhook(w http.ResponseWriter, r *http.Request, s *session) {
	d.webhookWithForm(w, r, s, http.StatusOK, newForm())
}

func (d *Dashboard) webhookWithForm(w http.ResponseWriter, r *http.Request, s *session, status int, f *form) {
	ctx := d.as(r, s)
	sub, err := d.opt.API.Webhook(ctx, api.WebhookRef{ID: r.PathValue("id")})
	if err != nil {
		d.apiErrorPage(w, r, s, *d.failure(err, "read a webhook"))
		return
	}
	q := r.URL.Query()
	state := q.Get("state")
	dq := api.DeliveriesQuery{ID: sub.ID, State: state, Limit: deliveriesPerPage}
	if b := q.Get("before"); b != "" {
		if dq.Before, err = strconv.ParseInt(b, 10, 64); err != nil || dq.Before < 1 {
			d.apiErrorPage(w, r, s, apiResult{Status: http.StatusUnprocessableEntity, Detail: "\"before\" must be a delivery id"})
			return
		}
	}
	log, err := d.opt.API.WebhookDeliveries(ctx, dq)
	if err != nil {
		d.apiErrorPage(w, r, s, *d.failure(err, "read a delivery log"))
		return
	}
	d.render(w, r, status, "webhook", map[string]any{"W": sub, "Deliveries": log.Deliveries, "Older": log.Next,
		"State": state, "Before": q.Get("before"), "Form": f}, s)
}

func (d *Dashboard) deleteWebhook(w http.ResponseWriter, r *http.Request, s *session) {
	f := formFrom(r, "confirm")
	if f.V("confirm") != "yes" {
		f.fail("confirm", "Tick the box to confirm: the delivery log and the events not yet delivered go with it.")
		d.webhookWithForm(w, r, s, http.StatusUnprocessableEntity, f)
		return
	}
	if _, err := d.opt.API.DeleteWebhook(d.as(r, s), api.WebhookRef{ID: r.PathValue("id")}); err != nil {
		fail := d.failure(err, "delete a webhook")
		f.apiError(*fail, nil)
		d.webhookWithForm(w, r, s, fail.Status, f)
		return
	}
	http.Redirect(w, r, Prefix+"webhooks?ok=webhook_deleted", http.StatusSeeOther)
}
