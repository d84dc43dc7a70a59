package dashboard

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
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
	handle("POST "+Prefix+"signout", d.action(d.signout))

	handle("GET "+Prefix+"{$}", d.page(d.overview))
	handle("GET "+Prefix+"live/overview", d.live(d.overviewLive))

	handle("GET "+Prefix+"workers", d.page(d.workers))
	handle("GET "+Prefix+"live/workers", d.live(d.workersLive))
	handle("POST "+Prefix+"workers", d.action(d.createWorker))
	handle("GET "+Prefix+"workers/{id}", d.page(d.worker))
	handle("POST "+Prefix+"workers/{id}/labels", d.action(d.workerLabels))
	handle("POST "+Prefix+"workers/{id}/drain", d.action(d.workerSimple("drain", "drained")))
	handle("POST "+Prefix+"workers/{id}/resume", d.action(d.workerSimple("resume", "resumed")))
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

	handle("GET "+Prefix+"audit", d.page(d.audit))
	handle("GET "+Prefix+"audit/verify", d.page(d.verifyAudit))
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
	res := d.call(r, s, "GET", "/api/queue/stats?history=0", nil)
	if !res.OK() {
		return nil, &res
	}
	var st statsJSON
	if err := res.decode(&st); err != nil {
		return nil, &apiResult{Status: 502, Detail: "unreadable stats: " + err.Error()}
	}
	data["Stats"], data["WorkersTotal"] = st, st.Workers["total"]
	var hist fleetHistoryJSON
	if res := d.call(r, s, "GET", "/api/admin/fleet/gpu-history", nil); res.OK() && res.decode(&hist) == nil {
		data["FleetChart"] = hist.chart()
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
	v := url.Values{"limit": {strconv.Itoa(workersPerPage)}, "offset": {strconv.Itoa((page - 1) * workersPerPage)}}
	if status != "" {
		v.Set("status", status)
	}
	res := d.call(r, s, "GET", "/api/admin/workers?"+v.Encode(), nil)
	if !res.OK() {
		return nil, &res
	}
	var body struct {
		Workers []workerJSON `json:"workers"`
		Total   int          `json:"total"`
	}
	if err := res.decode(&body); err != nil {
		return nil, &apiResult{Status: 502, Detail: "unreadable worker list: " + err.Error()}
	}
	return map[string]any{"Workers": body.Workers, "Total": body.Total, "Status": status, "Page": page,
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
	res := d.call(r, s, "POST", "/api/admin/workers", map[string]any{
		"name": strings.TrimSpace(f.V("name")), "worker_type": f.V("worker_type"), "labels": labels})
	if !res.OK() {
		f.apiError(res, map[string]string{"worker_type": "worker_type"})
		d.workersWithForm(w, r, s, res.Status, f)
		return
	}
	d.showToken(w, r, s, res, "created")
}

// showToken shows a new worker token, once. The page is never cached.
func (d *Dashboard) showToken(w http.ResponseWriter, r *http.Request, s *session, res apiResult, why string) {
	var body struct {
		WorkerID          string `json:"worker_id"`
		Name              string `json:"name"`
		Token             string `json:"token"`
		ConnectionCommand string `json:"connection_command"`
	}
	if err := res.decode(&body); err != nil {
		d.errorPage(w, r, s, http.StatusBadGateway, "The orchestrator's answer could not be read: "+err.Error())
		return
	}
	d.render(w, r, http.StatusOK, "token", map[string]any{"T": body, "Why": why}, s)
}

func (d *Dashboard) loadWorker(r *http.Request, s *session, id string) (workerJSON, apiResult) {
	var wk workerJSON
	res := d.call(r, s, "GET", "/api/admin/workers/"+url.PathEscape(id), nil)
	if res.OK() {
		if err := res.decode(&wk); err != nil {
			return wk, apiResult{Status: 502, Detail: "unreadable worker: " + err.Error()}
		}
	}
	return wk, res
}

func (d *Dashboard) worker(w http.ResponseWriter, r *http.Request, s *session) {
	d.workerWithForm(w, r, s, http.StatusOK, nil)
}

func (d *Dashboard) workerWithForm(w http.ResponseWriter, r *http.Request, s *session, status int, f *form) {
	wk, res := d.loadWorker(r, s, r.PathValue("id"))
	if !res.OK() {
		d.apiErrorPage(w, r, s, res)
		return
	}
	if f == nil {
		f = newForm()
		f.Values["labels"] = formatLabels(wk.Labels)
	}
	var hist workerHistoryJSON
	if res := d.call(r, s, "GET", "/api/admin/workers/"+url.PathEscape(wk.ID)+"/gpu-history", nil); res.OK() {
		_ = res.decode(&hist)
	}
	d.render(w, r, status, "worker", map[string]any{"W": wk, "Form": f, "Back": Prefix + "workers/" + wk.ID, "Charts": hist.charts()}, s)
}

// clearGPU lifts the fence of an unhealthy GPU.
func (d *Dashboard) clearGPU(w http.ResponseWriter, r *http.Request, s *session) {
	id := r.PathValue("id")
	res := d.call(r, s, "POST", "/api/admin/workers/"+url.PathEscape(id)+"/gpus/"+url.PathEscape(r.PathValue("index"))+"/clear", nil)
	if !res.OK() {
		f := newForm()
		f.apiError(res, nil)
		d.workerWithForm(w, r, s, res.Status, f)
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
	res := d.call(r, s, "PATCH", "/api/admin/workers/"+url.PathEscape(id), map[string]any{"labels": labels})
	if !res.OK() {
		f.apiError(res, nil)
		d.workerWithForm(w, r, s, res.Status, f)
		return
	}
	http.Redirect(w, r, Prefix+"workers/"+url.PathEscape(id)+"?ok=labels", http.StatusSeeOther)
}

// workerSimple posts a bodiless worker action (drain, resume).
func (d *Dashboard) workerSimple(verb, ok string) handler {
	return func(w http.ResponseWriter, r *http.Request, s *session) {
		id := r.PathValue("id")
		res := d.call(r, s, "POST", "/api/admin/workers/"+url.PathEscape(id)+"/"+verb, nil)
		if !res.OK() {
			f := newForm()
			f.apiError(res, nil)
			d.workerWithForm(w, r, s, res.Status, f)
			return
		}
		http.Redirect(w, r, backTo(r, Prefix+"workers/"+url.PathEscape(id), ok), http.StatusSeeOther)
	}
}

func (d *Dashboard) rotateToken(w http.ResponseWriter, r *http.Request, s *session) {
	id := r.PathValue("id")
	wk, res := d.loadWorker(r, s, id)
	if res.OK() {
		res = d.call(r, s, "POST", "/api/admin/workers/"+url.PathEscape(id)+"/token", nil)
	}
	if !res.OK() {
		f := newForm()
		f.apiError(res, nil)
		d.workerWithForm(w, r, s, res.Status, f)
		return
	}
	// The rotation reply has no name; add it for the page.
	var body map[string]any
	_ = json.Unmarshal(res.Body, &body)
	body["name"] = wk.Name
	res.Body, _ = json.Marshal(body)
	d.showToken(w, r, s, res, "rotated")
}

// deleteWorker deletes an offline worker at once; a connected one, or a
// forced delete, first needs an explicit confirmation.
func (d *Dashboard) deleteWorker(w http.ResponseWriter, r *http.Request, s *session) {
	id := r.PathValue("id")
	force := r.PostFormValue("force") == "1"
	confirmed := r.PostFormValue("confirm") == "yes"
	wk, res := d.loadWorker(r, s, id)
	if !res.OK() {
		d.apiErrorPage(w, r, s, res)
		return
	}
	if force && !confirmed {
		d.render(w, r, http.StatusOK, "delete", map[string]any{"W": wk}, s)
		return
	}
	target := "/api/admin/workers/" + url.PathEscape(id)
	if force {
		target += "?force=true"
	}
	res = d.call(r, s, "DELETE", target, nil)
	if res.Status == http.StatusConflict && !force {
		d.render(w, r, http.StatusConflict, "delete", map[string]any{"W": wk, "Detail": res.Detail}, s)
		return
	}
	if !res.OK() {
		f := newForm()
		f.apiError(res, nil)
		d.workerWithForm(w, r, s, res.Status, f)
		return
	}
	http.Redirect(w, r, Prefix+"workers?ok=deleted", http.StatusSeeOther)
}

// ---- queue and jobs

func (d *Dashboard) queueData(r *http.Request, s *session) (map[string]any, *apiResult) {
	q := r.URL.Query()
	status, page := q.Get("status"), pageNumber(r)
	v := url.Values{"order": {"newest"}, "limit": {strconv.Itoa(jobsPerPage)}, "offset": {strconv.Itoa((page - 1) * jobsPerPage)}}
	if status != "" {
		v.Set("status", status)
	}
	res := d.call(r, s, "GET", "/api/queue?"+v.Encode(), nil)
	if !res.OK() {
		return nil, &res
	}
	var body struct {
		Entries []jobJSON `json:"entries"`
		Total   int       `json:"total"`
	}
	if err := res.decode(&body); err != nil {
		return nil, &apiResult{Status: 502, Detail: "unreadable queue: " + err.Error()}
	}
	return map[string]any{"Jobs": body.Entries, "Total": body.Total, "Status": status, "Page": page,
		"Pages": pages(body.Total, jobsPerPage)}, nil
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
		var cfg struct {
			Configs []string `json:"configs"`
		}
		if res := d.call(r, s, "GET", "/api/configs", nil); res.OK() {
			_ = res.decode(&cfg)
		}
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
	body := map[string]any{"target": f.V("target")}
	if name := strings.TrimSpace(f.V("config_name")); name != "" {
		body["config_name"] = name
	}
	if raw := strings.TrimSpace(f.V("config_json")); raw != "" {
		if !json.Valid([]byte(raw)) {
			f.fail("config_json", "This is not valid JSON; paste a JSON object such as {\"model_type\": \"lora\"}.")
		}
		body["config"] = json.RawMessage(raw)
	}
	if labels, err := parseLabels(f.V("labels")); err != nil {
		f.fail("labels", err.Error())
	} else if len(labels) > 0 {
		body["worker_labels"] = labels
	}
	if v := f.optionalInt("priority"); v != nil {
		body["priority"] = *v
	}
	if v := f.optionalInt("gpu_count"); v != nil {
		body["gpu_count"] = *v
	}
	if v := f.optionalFloat("min_vram_gb"); v != nil {
		body["min_vram_gb"] = *v
	}
	if f.Failed() {
		d.queueWithForm(w, r, s, http.StatusUnprocessableEntity, f)
		return
	}
	res := d.call(r, s, "POST", "/api/queue/submit", body)
	if !res.OK() {
		if res.Status == http.StatusNotFound && res.Field() == "" {
			f.fail("config_name", res.Detail) // a config name that resolves to nothing
		} else {
			f.apiError(res, submitFields)
		}
		d.queueWithForm(w, r, s, res.Status, f)
		return
	}
	var out struct {
		JobID    string   `json:"job_id"`
		Warning  string   `json:"warning"`
		Warnings []string `json:"warnings"`
	}
	_ = res.decode(&out)
	var warnings []string
	for _, w := range append([]string{out.Warning}, out.Warnings...) {
		if w != "" {
			warnings = append(warnings, w)
		}
	}
	d.notices.put(s, "job:"+out.JobID, warnings, d.opt.Now())
	http.Redirect(w, r, Prefix+"jobs/"+url.PathEscape(out.JobID), http.StatusSeeOther)
}

func (d *Dashboard) loadJob(r *http.Request, s *session, id string) (jobJSON, apiResult) {
	var j jobJSON
	res := d.call(r, s, "GET", "/api/queue/"+url.PathEscape(id), nil)
	if res.OK() {
		if err := res.decode(&j); err != nil {
			return j, apiResult{Status: 502, Detail: "unreadable job: " + err.Error()}
		}
	}
	return j, res
}

func (d *Dashboard) job(w http.ResponseWriter, r *http.Request, s *session) {
	d.jobWithError(w, r, s, http.StatusOK, "")
}

func (d *Dashboard) jobWithError(w http.ResponseWriter, r *http.Request, s *session, status int, errMsg string) {
	j, res := d.loadJob(r, s, r.PathValue("id"))
	if !res.OK() {
		d.apiErrorPage(w, r, s, res)
		return
	}
	// The log as stored so far, for reading without JavaScript; the page's
	// script replaces it with the live stream.
	logText, truncated := "", false
	lr := d.doTail(apiRequest(r, &s.principal, "GET", "/api/queue/"+url.PathEscape(j.ID)+"/logs", nil), logTailBytes)
	if lr.OK() {
		b := lr.Body
		truncated = lr.Truncated
		if len(b) > logTailBytes {
			b, truncated = b[len(b)-logTailBytes:], true
		}
		logText = strings.ToValidUTF8(string(b), "")
	}
	d.render(w, r, status, "job", map[string]any{"J": j, "Log": logText, "LogTruncated": truncated, "Error": errMsg,
		"Warnings": d.notices.take(s, "job:"+j.ID, d.opt.Now())}, s)
}

func (d *Dashboard) jobLive(w http.ResponseWriter, r *http.Request, s *session) {
	j, res := d.loadJob(r, s, r.PathValue("id"))
	if !res.OK() {
		w.WriteHeader(res.Status)
		return
	}
	status := http.StatusOK
	if j.Terminal() {
		status = stopPolling
	}
	d.renderBlock(w, r, status, "job", "live", map[string]any{"J": j}, s)
}

// jobLog relays the API's live log stream (server-sent events) to the page.
func (d *Dashboard) jobLog(w http.ResponseWriter, r *http.Request, s *session) {
	d.opt.API.ServeHTTP(w, apiRequest(r, &s.principal, "GET", "/api/queue/"+url.PathEscape(r.PathValue("id"))+"/logs?follow=1", nil))
}

func (d *Dashboard) cancelJob(w http.ResponseWriter, r *http.Request, s *session) {
	id := r.PathValue("id")
	res := d.call(r, s, "POST", "/api/queue/"+url.PathEscape(id)+"/cancel", nil)
	if !res.OK() {
		msg := res.Detail
		if res.Status == http.StatusForbidden {
			msg = "Your token may not do this: " + res.Detail
		}
		d.jobWithError(w, r, s, res.Status, msg)
		return
	}
	http.Redirect(w, r, Prefix+"jobs/"+url.PathEscape(id)+"?ok=cancel", http.StatusSeeOther)
}

// ---- audit

func (d *Dashboard) auditData(r *http.Request, s *session, before int64) (map[string]any, *apiResult) {
	q := r.URL.Query()
	filter := map[string]string{"actor": strings.TrimSpace(q.Get("actor")), "action": strings.TrimSpace(q.Get("action")),
		"target": strings.TrimSpace(q.Get("target"))}
	v := url.Values{"order": {"newest"}, "limit": {strconv.Itoa(auditPerPage)}}
	for k, val := range filter {
		if val != "" {
			v.Set(k, val)
		}
	}
	if before == 0 {
		before, _ = strconv.ParseInt(q.Get("before"), 10, 64)
	}
	if before > 0 {
		v.Set("before", strconv.FormatInt(before, 10))
	}
	res := d.call(r, s, "GET", "/api/admin/audit?"+v.Encode(), nil)
	if !res.OK() {
		return nil, &res
	}
	var body auditPage
	if err := res.decode(&body); err != nil {
		return nil, &apiResult{Status: 502, Detail: "unreadable audit log: " + err.Error()}
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
	res := d.call(r, s, "GET", "/api/admin/audit/verify", nil)
	if !res.OK() {
		d.apiErrorPage(w, r, s, res)
		return
	}
	var v verifyJSON
	if err := res.decode(&v); err != nil {
		d.errorPage(w, r, s, http.StatusBadGateway, "unreadable verification: "+err.Error())
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
