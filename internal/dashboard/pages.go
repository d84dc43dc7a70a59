package dashboard

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// stopPolling is the status that tells htmx to stop polling an element.
const stopPolling = 286

const (
	workersPerPage = 25
	jobsPerPage    = 25
	auditPerPage   = 50
	// logTailBytes is how much of a log the job page shows before live lines.
	logTailBytes = 256 << 10
)

func (d *Dashboard) routes() {
	m := http.NewServeMux()
	handle := func(pattern string, h http.HandlerFunc) { m.Handle(pattern, secure(h)) }
	handle("GET "+Prefix+"static/{hash}/{file}", d.serveStatic)
	handle("GET "+Prefix+"signin", d.signinForm)
	handle("POST "+Prefix+"signin", d.signin)
	handle("POST "+Prefix+"signin/ldap", d.ldapSignin)
	handle("GET "+Prefix+"auth/oidc/start", d.oidcStart)
	handle("GET "+Prefix+"auth/oidc/callback", d.oidcCallback)
	handle("POST "+Prefix+"signout", d.action(d.signout))

	handle("GET "+Prefix+"{$}", d.page(d.overview))
	handle("GET "+Prefix+"live/overview", d.live(d.overviewLive))

	handle("GET "+Prefix+"workers", d.page(d.workers))
	handle("GET "+Prefix+"live/workers", d.live(d.workersLive))
	handle("POST "+Prefix+"workers", d.action(d.createWorker))
	handle("GET "+Prefix+"workers/{id}", d.page(d.worker))
	handle("POST "+Prefix+"workers/{id}/labels", d.action(d.workerLabels))
	handle("POST "+Prefix+"workers/{id}/drain", d.action(d.workerSimple(d.opt.API.DrainWorker, "drain", "drained")))
	handle("POST "+Prefix+"workers/{id}/resume", d.action(d.workerSimple(d.opt.API.ResumeWorker, "resume", "resumed")))
	handle("POST "+Prefix+"workers/{id}/token", d.action(d.rotateToken))
	handle("POST "+Prefix+"workers/{id}/delete", d.action(d.deleteWorker))
	handle("POST "+Prefix+"workers/{id}/gpus/{index}/clear", d.action(d.clearGPU))

	handle("GET "+Prefix+"queue", d.page(d.queue))
	handle("GET "+Prefix+"live/queue", d.live(d.queueLive))
	handle("POST "+Prefix+"queue", d.action(d.submitJob))
	handle("GET "+Prefix+"jobs/{id}", d.page(d.job))
	handle("GET "+Prefix+"live/jobs/{id}", d.live(d.jobLive))
	handle("GET "+Prefix+"jobs/{id}/log", d.live(d.jobLog))
	handle("POST "+Prefix+"jobs/{id}/cancel", d.action(d.cancelJob))
	handle("POST "+Prefix+"jobs/{id}/approve", d.action(d.decideJob(d.opt.API.Approve, "approved")))
	handle("POST "+Prefix+"jobs/{id}/reject", d.action(d.decideJob(d.opt.API.Reject, "rejected")))

	handle("GET "+Prefix+"audit", d.page(d.audit))
	handle("GET "+Prefix+"audit/verify", d.page(d.verifyAudit))
	handle("GET "+Prefix+"usage", d.page(d.usage))
	d.webhookRoutes(handle)

	m.Handle(Prefix, secure(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, _ := d.loadSession(r, false)
		d.errorPage(w, r, s, http.StatusNotFound, "There is no such page.")
	})))
	d.mux = m
}

// pageNumber reads ?page= (1-based).
func pageNumber(r *http.Request) int {
	n, err := strconv.Atoi(r.URL.Query().Get("page"))
	if err != nil || n < 1 {
		return 1
	}
	return n
}

func pages(total, per int) int { return max(1, (total+per-1)/per) }

// backTo picks where an action returns: the form's "back" page when it is a
// dashboard page, else def; ok names the message to show there.
func backTo(r *http.Request, def, ok string) string {
	target := def
	if b := r.PostFormValue("back"); b != "" {
		target = safeNext(b)
	}
	u, _ := url.Parse(target)
	q := u.Query()
	q.Set("ok", ok)
	u.RawQuery = q.Encode()
	return u.RequestURI()
}

// ---- overview

func (d *Dashboard) overviewData(r *http.Request, s *session) (map[string]any, *apiResult) {
	data := map[string]any{}
	if !s.Can(auth.ScopeQueueView) {
		data["NoAccess"] = true
		return data, nil
	}
	ctx := d.as(r, s)
	st, err := d.opt.API.Stats(ctx, false)
	if err != nil {
		return nil, d.failure(err, "stats")
	}
	data["Stats"], data["WorkersTotal"] = st, st.Workers["total"]
	if hist, err := d.opt.API.FleetGPUHistory(ctx, struct{}{}); err == nil {
		data["FleetChart"] = fleetChart(hist)
	}
	return data, nil
}

func (d *Dashboard) overview(w http.ResponseWriter, r *http.Request, s *session) {
	data, fail := d.overviewData(r, s)
	if fail != nil {
		d.apiErrorPage(w, r, s, *fail)
		return
	}
	d.render(w, r, http.StatusOK, "overview", data, s)
}

func (d *Dashboard) overviewLive(w http.ResponseWriter, r *http.Request, s *session) {
	data, fail := d.overviewData(r, s)
	if fail != nil {
		w.WriteHeader(fail.Status)
		return
	}
	d.renderBlock(w, r, http.StatusOK, "overview", "live", data, s)
}

// ---- workers

func (d *Dashboard) workersData(r *http.Request, s *session) (map[string]any, *apiResult) {
	q := r.URL.Query()
	status, page := q.Get("status"), pageNumber(r)
	body, err := d.opt.API.Workers(d.as(r, s), api.WorkersQuery{Status: status, Limit: workersPerPage, Offset: (page - 1) * workersPerPage})
	if err != nil {
		return nil, d.failure(err, "workers")
	}
	views := workerViews(body.Workers)
	for i, w := range views {
		// A worker running several jobs: which job holds which GPU is on
		// the worker's own record, read for those on this page only.
		if w.RunningJobs > 0 && w.MaxJobs > 1 {
			if full, err := d.opt.API.Worker(d.as(r, s), api.WorkerRef{ID: w.ID}); err == nil {
				views[i].Jobs = full.Jobs
			}
		}
	}
	return map[string]any{"Workers": views, "Total": body.Total, "Status": status, "Page": page,
		"Pages": pages(body.Total, workersPerPage), "Back": r.URL.RequestURI()}, nil
}

func (d *Dashboard) workers(w http.ResponseWriter, r *http.Request, s *session) {
	d.workersWithForm(w, r, s, http.StatusOK, formFrom(r))
}

func (d *Dashboard) workersWithForm(w http.ResponseWriter, r *http.Request, s *session, status int, f *form) {
	data, fail := d.workersData(r, s)
	if fail != nil {
		d.apiErrorPage(w, r, s, *fail)
		return
	}
	if f.V("worker_type") == "" {
		f.Values["worker_type"] = "persistent"
	}
	data["Form"] = f
	d.render(w, r, status, "workers", data, s)
}

func (d *Dashboard) workersLive(w http.ResponseWriter, r *http.Request, s *session) {
	data, fail := d.workersData(r, s)
	if fail != nil {
		w.WriteHeader(fail.Status)
		return
	}
	d.renderBlock(w, r, http.StatusOK, "workers", "live", data, s)
}

func (d *Dashboard) createWorker(w http.ResponseWriter, r *http.Request, s *session) {
	f := formFrom(r, "name", "worker_type", "labels")
	labels, err := parseLabels(f.V("labels"))
	if err != nil {
		f.fail("labels", err.Error())
	}
	if strings.TrimSpace(f.V("name")) == "" {
		f.fail("name", "A name is required.")
	}
	if f.Failed() {
		d.workersWithForm(w, r, s, http.StatusUnprocessableEntity, f)
		return
	}
	name := strings.TrimSpace(f.V("name"))
	created, err := d.opt.API.CreateWorker(d.as(r, s), api.CreateWorker{Name: &name,
		WorkerType: protocol.WorkerType(f.V("worker_type")), Labels: labels})
	if err != nil {
		res := d.failure(err, "create worker")
		f.apiError(*res, map[string]string{"worker_type": "worker_type"})
		d.workersWithForm(w, r, s, res.Status, f)
		return
	}
	d.showToken(w, r, s, newToken{WorkerID: created.WorkerID, Name: created.Name, Token: created.Token,
		ConnectionCommand: created.ConnectionCommand}, "created")
}

// newToken is a worker token the page shows once.
type newToken struct {
	WorkerID, Name, Token, ConnectionCommand string
}

// showToken shows a new worker token, once. The page is never cached.
func (d *Dashboard) showToken(w http.ResponseWriter, r *http.Request, s *session, t newToken, why string) {
	d.render(w, r, http.StatusOK, "token", map[string]any{"T": t, "Why": why}, s)
}

func (d *Dashboard) loadWorker(r *http.Request, s *session, id string) (workerView, *apiResult) {
	wk, err := d.opt.API.Worker(d.as(r, s), api.WorkerRef{ID: id})
	if err != nil {
		return workerView{}, d.failure(err, "worker")
	}
	return workerView{wk}, nil
}

func (d *Dashboard) worker(w http.ResponseWriter, r *http.Request, s *session) {
	d.workerWithForm(w, r, s, http.StatusOK, nil)
}

func (d *Dashboard) workerWithForm(w http.ResponseWriter, r *http.Request, s *session, status int, f *form) {
	wk, fail := d.loadWorker(r, s, r.PathValue("id"))
	if fail != nil {
		d.apiErrorPage(w, r, s, *fail)
		return
	}
	if f == nil {
		f = newForm()
		f.Values["labels"] = formatLabels(wk.Labels)
	}
	hist, _ := d.opt.API.WorkerGPUHistory(d.as(r, s), api.WorkerRef{ID: wk.ID})
	d.render(w, r, status, "worker", map[string]any{"W": wk, "Form": f, "Back": Prefix + "workers/" + wk.ID, "Charts": gpuCharts(hist)}, s)
}

// workerFailed shows the worker's page with the refusal of an action on it.
func (d *Dashboard) workerFailed(w http.ResponseWriter, r *http.Request, s *session, err error, what string) {
	res := d.failure(err, what)
	f := newForm()
	f.apiError(*res, nil)
	d.workerWithForm(w, r, s, res.Status, f)
}

// clearGPU lifts the fence of an unhealthy GPU.
func (d *Dashboard) clearGPU(w http.ResponseWriter, r *http.Request, s *session) {
	id := r.PathValue("id")
	index, err := strconv.Atoi(r.PathValue("index"))
	if err != nil || index < 0 {
		d.errorPage(w, r, s, http.StatusNotFound, "There is no such GPU.")
		return
	}
	if _, err := d.opt.API.ClearGPU(d.as(r, s), api.WorkerRef{ID: id, GPU: index}); err != nil {
		d.workerFailed(w, r, s, err, "clear GPU")
		return
	}
	http.Redirect(w, r, Prefix+"workers/"+url.PathEscape(id)+"?ok=gpu_cleared", http.StatusSeeOther)
}

func (d *Dashboard) workerLabels(w http.ResponseWriter, r *http.Request, s *session) {
	id := r.PathValue("id")
	f := formFrom(r, "labels")
	labels, err := parseLabels(f.V("labels"))
	if err != nil {
		f.fail("labels", err.Error())
		d.workerWithForm(w, r, s, http.StatusUnprocessableEntity, f)
		return
	}
	patch := map[string]*string{}
	for k, v := range labels {
		patch[k] = &v
	}
	if _, err := d.opt.API.PatchWorker(d.as(r, s), id, api.PatchWorker{Labels: patch}); err != nil {
		res := d.failure(err, "worker labels")
		f.apiError(*res, nil)
		d.workerWithForm(w, r, s, res.Status, f)
		return
	}
	http.Redirect(w, r, Prefix+"workers/"+url.PathEscape(id)+"?ok=labels", http.StatusSeeOther)
}

// workerSimple is a worker action without a form (drain, resume).
func (d *Dashboard) workerSimple(action func(context.Context, api.WorkerRef) (api.WorkerAction, error), what, ok string) handler {
	return func(w http.ResponseWriter, r *http.Request, s *session) {
		id := r.PathValue("id")
		if _, err := action(d.as(r, s), api.WorkerRef{ID: id}); err != nil {
			d.workerFailed(w, r, s, err, what)
			return
		}
		http.Redirect(w, r, backTo(r, Prefix+"workers/"+url.PathEscape(id), ok), http.StatusSeeOther)
	}
}

func (d *Dashboard) rotateToken(w http.ResponseWriter, r *http.Request, s *session) {
	id := r.PathValue("id")
	wk, fail := d.loadWorker(r, s, id)
	if fail != nil {
		f := newForm()
		f.apiError(*fail, nil)
		d.workerWithForm(w, r, s, fail.Status, f)
		return
	}
	t, err := d.opt.API.RotateWorkerToken(d.as(r, s), api.WorkerRef{ID: id})
	if err != nil {
		d.workerFailed(w, r, s, err, "rotate token")
		return
	}
	d.showToken(w, r, s, newToken{WorkerID: t.WorkerID, Name: wk.Name, Token: t.Token, ConnectionCommand: t.ConnectionCommand}, "rotated")
}

// deleteWorker deletes an offline worker at once; a connected one, or a
// forced delete, first needs an explicit confirmation.
func (d *Dashboard) deleteWorker(w http.ResponseWriter, r *http.Request, s *session) {
	id := r.PathValue("id")
	force := r.PostFormValue("force") == "1"
	confirmed := r.PostFormValue("confirm") == "yes"
	wk, fail := d.loadWorker(r, s, id)
	if fail != nil {
		d.apiErrorPage(w, r, s, *fail)
		return
	}
	if force && !confirmed {
		d.render(w, r, http.StatusOK, "delete", map[string]any{"W": wk}, s)
		return
	}
	if _, err := d.opt.API.DeleteWorker(d.as(r, s), api.WorkerRef{ID: id, Force: force}); err != nil {
		res := d.failure(err, "delete worker")
		if res.Status == http.StatusConflict && !force {
			d.render(w, r, http.StatusConflict, "delete", map[string]any{"W": wk, "Detail": res.Detail}, s)
			return
		}
		f := newForm()
		f.apiError(*res, nil)
		d.workerWithForm(w, r, s, res.Status, f)
		return
	}
	http.Redirect(w, r, Prefix+"workers?ok=deleted", http.StatusSeeOther)
}

// ---- queue and jobs

func (d *Dashboard) queueData(r *http.Request, s *session) (map[string]any, *apiResult) {
	q := r.URL.Query()
	status, page := q.Get("status"), pageNumber(r)
	body, err := d.opt.API.Jobs(d.as(r, s), api.JobsQuery{Status: status, Order: "newest", Limit: jobsPerPage, Offset: (page - 1) * jobsPerPage})
	if err != nil {
		return nil, d.failure(err, "jobs")
	}
	total := 0
	if body.Total != nil {
		total = *body.Total
	}
	var ids []string
	for _, j := range body.Entries {
		if j.WorkerID != nil {
			ids = append(ids, *j.WorkerID)
		}
	}
	return map[string]any{"Jobs": body.Entries, "Total": total, "Status": status, "Page": page,
		"Pages": pages(total, jobsPerPage), "Names": d.namesOf(d.as(r, s), ids...)}, nil
}

func (d *Dashboard) queue(w http.ResponseWriter, r *http.Request, s *session) {
	f := newForm()
	f.Values["target"], f.Values["priority"] = "auto", "10"
	d.queueWithForm(w, r, s, http.StatusOK, f)
}

func (d *Dashboard) queueWithForm(w http.ResponseWriter, r *http.Request, s *session, status int, f *form) {
	data, fail := d.queueData(r, s)
	if fail != nil {
		d.apiErrorPage(w, r, s, *fail)
		return
	}
	data["Form"] = f
	if s.Can(auth.ScopeQueueSubmit) {
		cfg, _ := d.opt.API.Configs(d.as(r, s), struct{}{})
		data["Configs"] = cfg.Configs
	}
	d.render(w, r, status, "queue", data, s)
}

func (d *Dashboard) queueLive(w http.ResponseWriter, r *http.Request, s *session) {
	data, fail := d.queueData(r, s)
	if fail != nil {
		w.WriteHeader(fail.Status)
		return
	}
	d.renderBlock(w, r, http.StatusOK, "queue", "live", data, s)
}

// submitFields maps the API's field names onto the submit form's.
var submitFields = map[string]string{"config": "config_json", "worker_labels": "labels"}

func (d *Dashboard) submitJob(w http.ResponseWriter, r *http.Request, s *session) {
	f := formFrom(r, "config_name", "config_json", "target", "priority", "labels", "gpu_count", "min_vram_gb")
	req := api.Submit{Target: protocol.Target(f.V("target")), Priority: f.optionalInt("priority"),
		GPUCount: f.optionalInt("gpu_count"), MinVRAMGB: f.optionalFloat("min_vram_gb")}
	if name := strings.TrimSpace(f.V("config_name")); name != "" {
		req.ConfigName = &name
	}
	if raw := strings.TrimSpace(f.V("config_json")); raw != "" {
		if !json.Valid([]byte(raw)) {
			f.fail("config_json", "This is not valid JSON; paste a JSON object such as {\"model_type\": \"lora\"}.")
		}
		req.Config = json.RawMessage(raw)
	}
	if labels, err := parseLabels(f.V("labels")); err != nil {
		f.fail("labels", err.Error())
	} else if len(labels) > 0 {
		req.WorkerLabels = labels
	}
	if f.Failed() {
		d.queueWithForm(w, r, s, http.StatusUnprocessableEntity, f)
		return
	}
	out, err := d.opt.API.Submit(d.as(r, s), req)
	if err != nil {
		res := d.failure(err, "submit")
		if res.Status == http.StatusNotFound && res.Field() == "" {
			f.fail("config_name", res.Detail) // a config name that resolves to nothing
		} else {
			f.apiError(*res, submitFields)
		}
		d.queueWithForm(w, r, s, res.Status, f)
		return
	}
	var warnings []string
	for _, w := range append([]string{out.Warning}, out.Warnings...) {
		if w != "" {
			warnings = append(warnings, w)
		}
	}
	d.notices.put(s, "job:"+out.JobID, warnings, d.opt.Now())
	http.Redirect(w, r, Prefix+"jobs/"+url.PathEscape(out.JobID), http.StatusSeeOther)
}

func (d *Dashboard) loadJob(r *http.Request, s *session, id string) (api.Job, *apiResult) {
	j, err := d.opt.API.Job(d.as(r, s), api.JobRef{ID: id})
	if err != nil {
		return j, d.failure(err, "job")
	}
	return j, nil
}

func (d *Dashboard) job(w http.ResponseWriter, r *http.Request, s *session) {
	d.jobWithError(w, r, s, http.StatusOK, "")
}

func (d *Dashboard) jobWithError(w http.ResponseWriter, r *http.Request, s *session, status int, errMsg string) {
	j, fail := d.loadJob(r, s, r.PathValue("id"))
	if fail != nil {
		d.apiErrorPage(w, r, s, *fail)
		return
	}
	// The log as stored so far, for reading without JavaScript; the page's
	// script replaces it with the live stream.
	log := &tailBuffer{keep: logTailBytes}
	logText, truncated := "", false
	if d.opt.API.WriteJobLog(d.as(r, s), j.ID, log) == nil {
		b, cut := log.tail()
		logText, truncated = strings.ToValidUTF8(string(b), ""), cut
	}
	d.render(w, r, status, "job", map[string]any{"J": j, "Names": d.jobWorkerNames(r, s, j), "Log": logText, "LogTruncated": truncated, "Error": errMsg,
		"Warnings": d.notices.take(s, "job:"+j.ID, d.opt.Now())}, s)
}

func (d *Dashboard) jobLive(w http.ResponseWriter, r *http.Request, s *session) {
	j, fail := d.loadJob(r, s, r.PathValue("id"))
	if fail != nil {
		w.WriteHeader(fail.Status)
		return
	}
	status := http.StatusOK
	if j.Terminal() {
		status = stopPolling
	}
	d.renderBlock(w, r, status, "job", "live", map[string]any{"J": j, "Names": d.jobWorkerNames(r, s, j)}, s)
}

// jobWorkerNames names the workers a job's attempts ran on.
func (d *Dashboard) jobWorkerNames(r *http.Request, s *session, j api.Job) workerNames {
	ids := make([]string, 0, len(j.Attempts))
	for _, a := range j.Attempts {
		ids = append(ids, a.WorkerID)
	}
	if j.WorkerID != nil {
		ids = append(ids, *j.WorkerID)
	}
	return d.namesOf(d.as(r, s), ids...)
}

// jobLog relays the API's live log stream (server-sent events) to the page.
func (d *Dashboard) jobLog(w http.ResponseWriter, r *http.Request, s *session) {
	req, _ := http.NewRequestWithContext(orchestrator.WithPrincipal(r.Context(), s.principal), http.MethodGet,
		"/api/queue/"+url.PathEscape(r.PathValue("id"))+"/logs?follow=1", nil)
	req.RemoteAddr, req.Host, req.TLS = r.RemoteAddr, r.Host, r.TLS
	d.opt.HTTP.ServeHTTP(w, req)
}

func (d *Dashboard) cancelJob(w http.ResponseWriter, r *http.Request, s *session) {
	id := r.PathValue("id")
	if _, err := d.opt.API.CancelJob(d.as(r, s), api.JobRef{ID: id}); err != nil {
		res := d.failure(err, "cancel job")
		msg := res.Detail
		if res.Status == http.StatusForbidden {
			msg = "Your token may not do this: " + res.Detail
		}
		d.jobWithError(w, r, s, res.Status, msg)
		return
	}
	http.Redirect(w, r, Prefix+"jobs/"+url.PathEscape(id)+"?ok=cancel", http.StatusSeeOther)
}

// decideJob approves or rejects a held job (the API checks who may).
func (d *Dashboard) decideJob(call func(context.Context, api.ApprovalDecision) (api.ApprovalDecided, error), done string) handler {
	return func(w http.ResponseWriter, r *http.Request, s *session) {
		id := r.PathValue("id")
		dec := api.ApprovalDecision{Ref: api.ApprovalRef{JobID: id}, Notes: r.PostFormValue("notes"), Reason: r.PostFormValue("reason")}
		if _, err := call(d.as(r, s), dec); err != nil {
			res := d.failure(err, "decide on job")
			d.jobWithError(w, r, s, res.Status, res.Detail)
			return
		}
		http.Redirect(w, r, Prefix+"jobs/"+url.PathEscape(id)+"?ok="+done, http.StatusSeeOther)
	}
}

// ---- audit

func (d *Dashboard) auditData(r *http.Request, s *session, before int64) (map[string]any, *apiResult) {
	q := r.URL.Query()
	filter := map[string]string{"actor": strings.TrimSpace(q.Get("actor")), "action": strings.TrimSpace(q.Get("action")),
		"target": strings.TrimSpace(q.Get("target"))}
	if before == 0 {
		before, _ = strconv.ParseInt(q.Get("before"), 10, 64)
	}
	body, err := d.opt.API.Audit(d.as(r, s), api.AuditQuery{Newest: true, Actor: filter["actor"], Action: filter["action"],
		Target: filter["target"], Before: max(before, 0), Limit: auditPerPage})
	if err != nil {
		return nil, d.failure(err, "audit")
	}
	data := map[string]any{"Records": body.Records, "Filter": filter, "Before": before}
	if n := len(body.Records); n == auditPerPage {
		data["Older"] = strconv.FormatInt(body.Records[n-1].Seq, 10)
	}
	return data, nil
}

func (d *Dashboard) audit(w http.ResponseWriter, r *http.Request, s *session) {
	data, fail := d.auditData(r, s, 0)
	if fail != nil {
		d.apiErrorPage(w, r, s, *fail)
		return
	}
	d.render(w, r, http.StatusOK, "audit", data, s)
}

// verifyAudit checks the whole chain and shows the result above the log,
// starting the listing at the broken record when there is one.
func (d *Dashboard) verifyAudit(w http.ResponseWriter, r *http.Request, s *session) {
	v, err := d.opt.API.VerifyAudit(d.as(r, s), struct{}{})
	if err != nil {
		d.apiErrorPage(w, r, s, *d.failure(err, "verify audit"))
		return
	}
	var before int64
	if !v.OK {
		before = v.BrokenAt + 1
	}
	data, fail := d.auditData(r, s, before)
	if fail != nil {
		d.apiErrorPage(w, r, s, *fail)
		return
	}
	data["Verify"] = v
	d.render(w, r, http.StatusOK, "audit", data, s)
}
