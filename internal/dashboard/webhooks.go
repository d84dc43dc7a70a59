package dashboard

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

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
	res := d.call(r, s, "GET", "/api/admin/webhooks", nil)
	if !res.OK() {
		d.apiErrorPage(w, r, s, res)
		return
	}
	var body struct {
		Webhooks []spec.Subscription `json:"webhooks"`
	}
	if err := res.decode(&body); err != nil {
		d.errorPage(w, r, s, http.StatusBadGateway, "unreadable webhook list: "+err.Error())
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
	res := d.call(r, s, "POST", "/api/admin/webhooks", spec.CreateRequest{Name: strings.TrimSpace(f.V("name")),
		URL: strings.TrimSpace(f.V("url")), Events: events, Team: strings.TrimSpace(f.V("team")), Format: f.V("format"),
		Secret: f.V("secret")})
	if !res.OK() {
		f.Values["secret"] = "" // never sent back to the browser
		f.apiError(res, nil)
		d.webhooksWithForm(w, r, s, res.Status, f)
		return
	}
	var created spec.Created
	if err := res.decode(&created); err != nil {
		d.errorPage(w, r, s, http.StatusBadGateway, "The orchestrator's answer could not be read: "+err.Error())
		return
	}
	d.render(w, r, http.StatusCreated, "webhook", map[string]any{"W": created.Subscription, "Secret": created.Secret}, s)
}

// webhook shows a subscription and a page of its delivery log.
func (d *Dashboard) webhook(w http.ResponseWriter, r *http.Request, s *session) {
	d.webhookWithForm(w, r, s, http.StatusOK, newForm())
}

func (d *Dashboard) webhookWithForm(w http.ResponseWriter, r *http.Request, s *session, status int, f *form) {
	id := r.PathValue("id")
	res := d.call(r, s, "GET", "/api/admin/webhooks/"+url.PathEscape(id), nil)
	if !res.OK() {
		d.apiErrorPage(w, r, s, res)
		return
	}
	var sub spec.Subscription
	if err := res.decode(&sub); err != nil {
		d.errorPage(w, r, s, http.StatusBadGateway, "unreadable webhook: "+err.Error())
		return
	}
	q := r.URL.Query()
	state := q.Get("state")
	v := url.Values{"limit": {strconv.Itoa(deliveriesPerPage)}}
	if state != "" {
		v.Set("state", state)
	}
	if b := q.Get("before"); b != "" {
		v.Set("before", b)
	}
	res = d.call(r, s, "GET", "/api/admin/webhooks/"+url.PathEscape(sub.ID)+"/deliveries?"+v.Encode(), nil)
	if !res.OK() {
		d.apiErrorPage(w, r, s, res)
		return
	}
	var log struct {
		Deliveries []spec.Delivery `json:"deliveries"`
		Next       string          `json:"next"`
	}
	if err := res.decode(&log); err != nil {
		d.errorPage(w, r, s, http.StatusBadGateway, "unreadable delivery log: "+err.Error())
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
	res := d.call(r, s, "DELETE", "/api/admin/webhooks/"+url.PathEscape(r.PathValue("id")), nil)
	if !res.OK() {
		f.apiError(res, nil)
		d.webhookWithForm(w, r, s, res.Status, f)
		return
	}
	http.Redirect(w, r, Prefix+"webhooks?ok=webhook_deleted", http.StatusSeeOther)
}
