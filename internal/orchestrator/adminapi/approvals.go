package adminapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/approval"
	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/web"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// ApprovalStore is what the approval calls read and write: the rules made
// through the API, the requests of held jobs, and the audit of refusals.
type ApprovalStore interface {
	InsertHeldJob(ctx context.Context, j store.Job, r store.ApprovalRequest, rec *audit.Record) (store.Job, store.ApprovalRequest, error)
	DecideApproval(ctx context.Context, d store.ApprovalDecision) (store.Job, store.ApprovalRequest, error)
	GetApprovalRequest(ctx context.Context, id int64) (store.ApprovalRequest, error)
	GetApprovalRequestByJob(ctx context.Context, jobID string) (store.ApprovalRequest, error)
	ListApprovalRequests(ctx context.Context, f store.ApprovalFilter) ([]store.ApprovalRequest, int, error)
	CountPendingApprovals(ctx context.Context, teams []string) (int, error)
	SubmitCounts(ctx context.Context, actor, day string) (ever, onDay int, err error)
	ListApprovalRules(ctx context.Context) ([]store.ApprovalRule, error)
	GetApprovalRule(ctx context.Context, idOrName string) (store.ApprovalRule, error)
	CreateApprovalRule(ctx context.Context, r store.ApprovalRule, rec *audit.Record) (store.ApprovalRule, error)
	UpdateApprovalRule(ctx context.Context, id string, fn func(*store.ApprovalRule) (*audit.Record, error)) (store.ApprovalRule, error)
	DeleteApprovalRule(ctx context.Context, id string, rec *audit.Record) error
	AppendAudit(ctx context.Context, rec audit.Record) error
}

// configRulePrefix starts the ID of a rule of [[approval_rules]].
const configRulePrefix = "config:"

func (a *API) approvalRoutes() []web.Route {
	ok, approve, view, rules := http.StatusOK, auth.ScopeQueueApprove, auth.ScopeQueueView, auth.ScopeAdminApprovals
	list := httpCall(a, approve, ok, approvalsQuery, a.ApprovalRequests)
	count := httpCall(a, approve, ok, noRequest, a.PendingApprovalCount)
	byID := httpCall(a, view, ok, requestRef, a.ApprovalRequest)
	byJob := httpCall(a, view, ok, func(_ http.ResponseWriter, _ *http.Request, ps httprouter.Params) (api.ApprovalRef, error) {
		return api.ApprovalRef{JobID: ps.ByName("action")}, nil
	}, a.ApprovalRequest)
	approveReq := httpCall(a, approve, ok, a.decisionBody(requestRef), a.Approve)
	rejectReq := httpCall(a, approve, ok, a.decisionBody(requestRef), a.Reject)
	// httprouter cannot hold /requests/pending/count and /requests/job/:job_id
	// beside /requests/:id, so the fixed names are picked out of the parameters.
	getTwo := func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
		switch {
		case ps.ByName("id") == "pending" && ps.ByName("action") == "count":
			count(w, r, ps)
		case ps.ByName("id") == "job":
			byJob(w, r, ps)
		default:
			a.errors.Write(w, r, web.NotFound("no such endpoint: GET %s", r.URL.Path))
		}
	}
	postTwo := func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
		switch ps.ByName("action") {
		case "approve":
			approveReq(w, r, ps)
		case "reject":
			rejectReq(w, r, ps)
		default:
			a.errors.Write(w, r, web.NotFound("no such endpoint: POST %s", r.URL.Path))
		}
	}
	return []web.Route{
		web.NewRoute("GET", "/api/approvals/requests", "", list),
		web.NewRoute("GET", "/api/approvals/requests/:id", "GET /api/approvals/requests/{id}", byID),
		web.NewRoute("GET", "/api/approvals/requests/:id/:action", "GET /api/approvals/requests/pending/count", getTwo),
		web.NewRoute("POST", "/api/approvals/requests/:id/:action", "POST /api/approvals/requests/{id}/approve", postTwo),
		web.NewRoute("POST", "/api/queue/:job_id/approve", "", httpCall(a, approve, ok, a.decisionBody(jobApprovalRef), a.Approve)),
		web.NewRoute("POST", "/api/queue/:job_id/reject", "", httpCall(a, approve, ok, a.decisionBody(jobApprovalRef), a.Reject)),
		web.NewRoute("GET", "/api/approvals/rules", "", httpCall(a, view, ok, noRequest, a.ApprovalRules)),
		web.NewRoute("POST", "/api/approvals/rules", "", httpCall(a, rules, http.StatusCreated, a.ruleBody, a.CreateApprovalRule)),
		web.NewRoute("GET", "/api/approvals/rules/:id", "", httpCall(a, view, ok, ruleRef, a.ApprovalRule)),
		web.NewRoute("PATCH", "/api/approvals/rules/:id", "", httpCall(a, rules, ok, a.ruleBody, a.PatchApprovalRule)),
		web.NewRoute("DELETE", "/api/approvals/rules/:id", "", httpCall(a, rules, ok, ruleRef, a.DeleteApprovalRule)),
	}
}

// Approval request states a list may ask for.
var requestStatuses = []string{store.ApprovalPending, store.ApprovalApproved, store.ApprovalRejected, store.ApprovalCancelled}

func approvalsQuery(_ http.ResponseWriter, r *http.Request, _ httprouter.Params) (api.ApprovalRequestsQuery, error) {
	q := r.URL.Query()
	out := api.ApprovalRequestsQuery{Status: q.Get("status")}
	switch p := q.Get("pending_only"); p {
	case "", "0", "false":
	case "1", "true":
		out.PendingOnly = true
	default:
		return out, web.Invalid("query parameter \"pending_only\" must be true or false; got %q", p)
	}
	var err error
	out.Limit, out.Offset, err = page(r, 50, 200)
	return out, err
}

func requestRef(_ http.ResponseWriter, _ *http.Request, ps httprouter.Params) (api.ApprovalRef, error) {
	id, err := strconv.ParseInt(ps.ByName("id"), 10, 64)
	if err != nil || id <= 0 {
		return api.ApprovalRef{}, web.NotFound("Approval request not found: %s", ps.ByName("id"))
	}
	return api.ApprovalRef{ID: id}, nil
}

func jobApprovalRef(_ http.ResponseWriter, _ *http.Request, ps httprouter.Params) (api.ApprovalRef, error) {
	return api.ApprovalRef{JobID: ps.ByName("job_id")}, nil
}

func ruleRef(_ http.ResponseWriter, _ *http.Request, ps httprouter.Params) (api.RuleRef, error) {
	return api.RuleRef{ID: ps.ByName("id")}, nil
}

// decisionBody reads an approve's or a reject's optional body ({notes,
// reason}); SimpleTuner's queue endpoints pass the reason as ?reason=.
func (a *API) decisionBody(ref func(http.ResponseWriter, *http.Request, httprouter.Params) (api.ApprovalRef, error)) func(http.ResponseWriter, *http.Request, httprouter.Params) (api.ApprovalDecision, error) {
	return func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) (api.ApprovalDecision, error) {
		var d api.ApprovalDecision
		var err error
		if d.Ref, err = ref(w, r, ps); err != nil {
			return d, err
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, a.options().MaxBodyBytes))
		if err != nil {
			return d, web.Errorf(http.StatusRequestEntityTooLarge, protocol.CodeTooLarge, "request body too large or unreadable: %v", err)
		}
		if strings.TrimSpace(string(body)) != "" {
			if err := web.DecodeBody(body, &d); err != nil {
				return d, err
			}
		}
		if d.Reason == "" {
			d.Reason = r.URL.Query().Get("reason")
		}
		return d, nil
	}
}

// approvalFor checks the rules against a job about to be submitted: the
// request to store with it when one holds it, else nil.
func (a *API) approvalFor(ctx context.Context, j store.Job) (*store.ApprovalRequest, error) {
	rules, err := a.allApprovalRules(ctx)
	if err != nil || len(rules) == 0 {
		return nil, err
	}
	f := approval.Facts{GPUs: j.GPUCount, WholeWorker: j.WholeWorker, ConfigName: j.ConfigName, Team: j.Team,
		Config: j.Config, TimeoutSeconds: j.TimeoutSeconds, Submitter: j.SubmittedBy, LargestWorkerGPUs: a.workers.LargestWorker()}
	if approval.Counted(rules) {
		if f.SubmittedEver, f.SubmittedToday, err = a.store.SubmitCounts(ctx, j.SubmittedBy, j.CreatedAt.UTC().Format(time.DateOnly)); err != nil {
			return nil, err
		}
	}
	r, why := approval.Match(rules, f)
	if r == nil {
		return nil, nil
	}
	req := &store.ApprovalRequest{RuleID: r.ID, RuleName: r.Name, Reason: why, Approver: r.Approver}
	if hours, known := approval.EstimateGPUHours(f, r.SecondsPerStep); known {
		req.GPUHours = &hours
	}
	return req, nil
}

// allApprovalRules are the rules in the order they are checked: the
// configuration's, then the API's.
func (a *API) allApprovalRules(ctx context.Context) ([]approval.Rule, error) {
	out := slices.Clone(a.options().ApprovalRules)
	for i := range out {
		out[i].ID = configRulePrefix + out[i].Name
	}
	stored, err := a.store.ListApprovalRules(ctx)
	if err != nil {
		return nil, err
	}
	for _, s := range stored {
		c, err := approval.Decode(s.Conditions)
		if err != nil {
			return nil, fmt.Errorf("approval rule %s: stored conditions: %w", s.ID, err)
		}
		out = append(out, approval.Rule{ID: s.ID, Name: s.Name, Approver: s.Approver, Conditions: c})
	}
	return out, nil
}

// submitHeld stores a job an approval rule holds, with its request.
func (a *API) submitHeld(ctx context.Context, c Caller, j store.Job, req store.ApprovalRequest, rec audit.Record) (api.Submitted, error) {
	// Its error line says why it waits, wherever the job is shown; an
	// approval clears it.
	j.Error = fmt.Sprintf("waiting for approval (rule %s): %s", req.RuleName, req.Reason)
	j, req, err := a.store.InsertHeldJob(ctx, j, req, &rec)
	if err != nil {
		return api.Submitted{}, dependencyInsertError(err)
	}
	a.log.Info("job submitted and held for approval", "job_id", j.ID, "config_name", j.ConfigName, "team", j.Team,
		"rule", req.RuleName, "request_id", req.ID, "by", c.Actor())
	return api.Submitted{Success: true, JobID: j.ID, Status: string(j.Status), GPUCount: gpuCountView(j), WholeWorker: j.WholeWorker,
		GPUAllocation: protocol.GPUAllocation(j.GPUCount, j.WholeWorker), RequiresApproval: true,
		Approval: &api.SubmitApproval{RequestID: req.ID, Rule: req.RuleName, Reason: req.Reason}}, nil
}

// approverTeams are the teams whose requests c decides on; nil for every
// team.
func approverTeams(c Caller) []string {
	if c.Fleet() {
		return nil
	}
	out := []string{}
	for _, t := range c.Teams() {
		if c.HasIn(t, auth.ScopeQueueApprove) {
			out = append(out, t)
		}
	}
	return out
}

// ApprovalRequests lists the requests of the teams the caller approves
// for, newest first.
func (a *API) ApprovalRequests(ctx context.Context, q api.ApprovalRequestsQuery) (api.ApprovalRequests, error) {
	c, err := authorize(ctx, auth.ScopeQueueApprove)
	if err != nil {
		return api.ApprovalRequests{}, err
	}
	status := strings.ToLower(q.Status)
	if q.PendingOnly {
		status = store.ApprovalPending
	}
	if status != "" && !slices.Contains(requestStatuses, status) {
		return api.ApprovalRequests{}, web.Invalid("query parameter \"status\" must be one of %s; got %q", strings.Join(requestStatuses, ", "), q.Status)
	}
	teams := approverTeams(c)
	rs, total, err := a.store.ListApprovalRequests(ctx, store.ApprovalFilter{Teams: teams, Status: status, Limit: q.Limit, Offset: q.Offset})
	if err != nil {
		return api.ApprovalRequests{}, err
	}
	pending, err := a.store.CountPendingApprovals(ctx, teams)
	if err != nil {
		return api.ApprovalRequests{}, err
	}
	out := api.ApprovalRequests{Requests: []api.ApprovalRequest{}, Total: total, PendingCount: pending}
	for _, r := range rs {
		out.Requests = append(out.Requests, requestView(r))
	}
	return out, nil
}

// PendingApprovalCount counts the pending requests the caller decides on.
func (a *API) PendingApprovalCount(ctx context.Context, _ struct{}) (api.PendingApprovals, error) {
	c, err := authorize(ctx, auth.ScopeQueueApprove)
	if err != nil {
		return api.PendingApprovals{}, err
	}
	n, err := a.store.CountPendingApprovals(ctx, approverTeams(c))
	return api.PendingApprovals{Count: n}, err
}

// ApprovalRequest reads one request, by number or by job: whoever sees
// the job sees its request.
func (a *API) ApprovalRequest(ctx context.Context, ref api.ApprovalRef) (api.ApprovalRequest, error) {
	c, err := authorize(ctx, auth.ScopeQueueView)
	if err != nil {
		return api.ApprovalRequest{}, err
	}
	r, _, err := a.requestFor(ctx, c, ref, auth.ScopeQueueView)
	if err != nil {
		return api.ApprovalRequest{}, err
	}
	return requestView(r), nil
}

// requestNotFound answers an unknown request, and one of a job c may not see.
func requestNotFound(ref api.ApprovalRef) error {
	if ref.JobID != "" {
		return web.NotFound("Approval request not found for job: %s", ref.JobID)
	}
	return web.NotFound("Approval request not found: %d", ref.ID)
}

// requestFor reads the request ref names and its job, for c acting under
// scope: a request of a job c may not see is not found.
func (a *API) requestFor(ctx context.Context, c Caller, ref api.ApprovalRef, scope string) (store.ApprovalRequest, store.Job, error) {
	var r store.ApprovalRequest
	var err error
	if ref.JobID != "" {
		r, err = a.store.GetApprovalRequestByJob(ctx, ref.JobID)
	} else {
		r, err = a.store.GetApprovalRequest(ctx, ref.ID)
	}
	if errors.Is(err, store.ErrNotFound) {
		return r, store.Job{}, requestNotFound(ref)
	}
	if err != nil {
		return r, store.Job{}, err
	}
	j, err := a.jobFor(ctx, c, r.JobID, scope)
	var ae *api.Error
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
		if scope == auth.ScopeQueueApprove {
			a.auditRefusal(ctx, c, r, "the job belongs to a team the caller does not approve for")
		}
		return r, j, requestNotFound(ref)
	}
	return r, j, err
}

// Approve approves a pending request: its job joins the queue.
func (a *API) Approve(ctx context.Context, d api.ApprovalDecision) (api.ApprovalDecided, error) {
	return a.decide(ctx, d, true)
}

// Reject rejects a pending request: its job ends cancelled, its error
// naming who rejected it and why.
func (a *API) Reject(ctx context.Context, d api.ApprovalDecision) (api.ApprovalDecided, error) {
	return a.decide(ctx, d, false)
}

func (a *API) decide(ctx context.Context, d api.ApprovalDecision, approve bool) (api.ApprovalDecided, error) {
	c, err := authorize(ctx, auth.ScopeQueueApprove)
	if err != nil {
		return api.ApprovalDecided{}, err
	}
	if !approve && strings.TrimSpace(d.Reason) == "" {
		return api.ApprovalDecided{}, web.Errorf(http.StatusBadRequest, protocol.CodeInvalidRequest, "Rejection reason is required (field \"reason\")")
	}
	if err := checkDecisionText(d); err != nil {
		return api.ApprovalDecided{}, err
	}
	r, j, err := a.requestFor(ctx, c, d.Ref, auth.ScopeQueueApprove)
	if err != nil {
		return api.ApprovalDecided{}, err
	}
	if err := a.mayDecide(ctx, c, r, j); err != nil {
		return api.ApprovalDecided{}, err
	}
	action, details := "approval.approve", map[string]any{"request_id": r.ID, "rule": r.RuleName, "team": r.Team}
	if approve {
		details["notes"] = d.Notes
	} else {
		action, details["reason"] = "approval.reject", d.Reason
	}
	rec := audit.New(c.Actor(), c.IP, action, "job", r.JobID, audit.Success, details)
	nj, nr, err := a.store.DecideApproval(ctx, store.ApprovalDecision{RequestID: r.ID, Approve: approve, By: c.Actor(),
		Notes: d.Notes, Reason: d.Reason, Audit: &rec})
	if errors.Is(err, store.ErrConflict) {
		now, _ := a.store.GetApprovalRequest(ctx, r.ID)
		return api.ApprovalDecided{}, web.Conflict("approval request %d is already %s", r.ID, now.Status)
	}
	if err != nil {
		return api.ApprovalDecided{}, err
	}
	a.afterDecision(nj)
	a.log.Info("approval decided", "request_id", nr.ID, "job_id", nj.ID, "status", nr.Status, "by", c.Actor())
	out := api.ApprovalDecided{Success: true, RequestID: nr.ID, JobID: nj.ID, Status: string(nj.Status)}
	if approve {
		out.ApprovedBy = c.Actor()
	} else {
		out.RejectedBy = c.Actor()
	}
	return out, nil
}

// checkDecisionText bounds the notes and the reason.
func checkDecisionText(d api.ApprovalDecision) error {
	for name, v := range map[string]string{"notes": d.Notes, "reason": d.Reason} {
		if len(v) > 2000 {
			return web.Invalid("field %q is too long (2000 bytes at most)", name)
		}
		if err := web.Printable(name, v); err != nil {
			return err
		}
	}
	return nil
}

// mayDecide refuses, audited, a decision on one's own job and one a rule
// leaves to admins; a fleet admin decides on any.
func (a *API) mayDecide(ctx context.Context, c Caller, r store.ApprovalRequest, j store.Job) error {
	if c.Fleet() {
		return nil
	}
	if r.Approver == approval.ApproverAdmin {
		a.auditRefusal(ctx, c, r, "the rule leaves the decision to an admin")
		return web.Errorf(http.StatusForbidden, protocol.CodeForbidden,
			"approval request %d (rule %s) is for an admin to decide", r.ID, r.RuleName)
	}
	if j.SubmittedBy == c.Actor() {
		a.auditRefusal(ctx, c, r, "the caller submitted the job")
		return web.Errorf(http.StatusForbidden, protocol.CodeForbidden,
			"approval request %d is for your own job: another lead of team %q (or an admin) decides on it", r.ID, auth.NormalTeam(r.Team))
	}
	return nil
}

// auditRefusal records a refused decision; a failure to record it is
// logged, the refusal stands.
func (a *API) auditRefusal(ctx context.Context, c Caller, r store.ApprovalRequest, why string) {
	rec := audit.New(c.Actor(), c.IP, "approval.refused", "job", r.JobID, audit.Failure,
		map[string]any{"request_id": r.ID, "reason": why})
	if err := a.store.AppendAudit(ctx, rec); err != nil {
		a.log.Warn("could not audit a refused approval", "request_id", r.ID, "err", err)
	}
}

// afterDecision does what follows a decision here: an approved job is
// scheduled, a rejected one ends its log followers.
func (a *API) afterDecision(j store.Job) {
	if a.logFeed != nil {
		a.logFeed.Moved(j.ID)
	}
	if j.Status == protocol.JobQueued {
		a.events.WakeSchedulers()
	}
}

func requestView(r store.ApprovalRequest) api.ApprovalRequest {
	v := api.ApprovalRequest{ID: r.ID, JobID: r.JobID, UserID: r.RequestedBy, RequestedBy: r.RequestedBy, Team: auth.NormalTeam(r.Team),
		RuleID: r.RuleID, RuleName: r.RuleName, Status: r.Status, Reason: r.Reason, ConfigName: r.ConfigName, JobStatus: r.JobStatus,
		EstimatedCost: r.GPUHours, Approver: r.Approver, CreatedAt: r.CreatedAt.UTC().Format(time.RFC3339Nano)}
	if r.Status != store.ApprovalPending {
		by, notes := r.ReviewedBy, r.ReviewNotes
		v.ReviewedBy, v.ReviewNotes = &by, &notes
		if r.ReviewedAt != nil {
			at := r.ReviewedAt.UTC().Format(time.RFC3339Nano)
			v.ReviewedAt = &at
		}
	}
	return v
}

// Rules.

// ruleFields are the keys a rule's body may hold.
var ruleFields = []string{"name", "approver", "gpus_over", "whole_worker", "gpu_hours_over", "seconds_per_step", "config_glob",
	"first_job", "team", "jobs_per_day_over"}

// ruleInput is a rule's body: the keys given, checked against ruleFields.
type ruleInput struct {
	ID     string
	Fields map[string]json.RawMessage
}

func (a *API) ruleBody(w http.ResponseWriter, r *http.Request, ps httprouter.Params) (ruleInput, error) {
	in := ruleInput{ID: ps.ByName("id")}
	if err := a.readJSON(w, r, &in.Fields); err != nil {
		return in, err
	}
	for _, k := range slices.Sorted(maps.Keys(in.Fields)) {
		if !slices.Contains(ruleFields, k) {
			return in, web.Invalid("unknown field %q; a rule's fields are %s", k, strings.Join(ruleFields, ", "))
		}
	}
	return in, nil
}

// apply sets the given fields on r.
func (in ruleInput) apply(r *approval.Rule) error {
	str := func(key string, dst *string) error {
		raw, ok := in.Fields[key]
		if !ok {
			return nil
		}
		if err := json.Unmarshal(raw, dst); err != nil {
			return web.Invalid("field %q must be a string", key)
		}
		return nil
	}
	if err := str("name", &r.Name); err != nil {
		return err
	}
	if err := str("approver", &r.Approver); err != nil {
		return err
	}
	cond := map[string]json.RawMessage{}
	_ = json.Unmarshal(r.Conditions.Encode(), &cond)
	for k, v := range in.Fields {
		if k != "name" && k != "approver" {
			cond[k] = v
		}
	}
	b, _ := json.Marshal(cond)
	var c approval.Conditions
	if err := web.DecodeBody(b, &c); err != nil {
		return err
	}
	r.Conditions = c
	return nil
}

// ApprovalRules lists every rule in the order they are checked.
func (a *API) ApprovalRules(ctx context.Context, _ struct{}) (api.ApprovalRules, error) {
	if _, err := authorize(ctx, auth.ScopeQueueView); err != nil {
		return api.ApprovalRules{}, err
	}
	out := api.ApprovalRules{Rules: []api.ApprovalRule{}}
	for i, r := range a.options().ApprovalRules {
		out.Rules = append(out.Rules, api.ApprovalRule{ID: configRulePrefix + r.Name, Name: r.Name, Source: store.RuleFromConfig,
			Position: i + 1, Approver: approverOf(r.Approver), Conditions: r.Conditions})
	}
	stored, err := a.store.ListApprovalRules(ctx)
	if err != nil {
		return api.ApprovalRules{}, err
	}
	for _, s := range stored {
		v, err := ruleView(s)
		if err != nil {
			return api.ApprovalRules{}, err
		}
		out.Rules = append(out.Rules, v)
	}
	return out, nil
}

func approverOf(a string) string {
	if a == "" {
		return approval.ApproverLead
	}
	return a
}

func ruleView(s store.ApprovalRule) (api.ApprovalRule, error) {
	c, err := approval.Decode(s.Conditions)
	if err != nil {
		return api.ApprovalRule{}, fmt.Errorf("approval rule %s: stored conditions: %w", s.ID, err)
	}
	return api.ApprovalRule{ID: s.ID, Name: s.Name, Source: s.Source, Position: s.Position, Approver: approverOf(s.Approver),
		CreatedAt: s.CreatedAt.UTC().Format(time.RFC3339Nano), CreatedBy: s.CreatedBy, Conditions: c}, nil
}

// ApprovalRule reads one rule by ID (or a configuration rule's name).
func (a *API) ApprovalRule(ctx context.Context, ref api.RuleRef) (api.ApprovalRule, error) {
	all, err := a.ApprovalRules(ctx, struct{}{})
	if err != nil {
		return api.ApprovalRule{}, err
	}
	for _, r := range all.Rules {
		if r.ID == ref.ID {
			return r, nil
		}
	}
	return api.ApprovalRule{}, web.NotFound("Approval rule not found: %s", ref.ID)
}

// checkRule validates a rule made or changed through the API.
func (a *API) checkRule(r approval.Rule) error {
	var teams []string
	for _, t := range a.options().Teams.Teams {
		teams = append(teams, t.Name)
	}
	if err := r.Check(teams); err != nil {
		return web.Invalid("%s", strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	for _, c := range a.options().ApprovalRules {
		if c.Name == r.Name {
			return web.Conflict("an approval rule named %q comes from the configuration ([[approval_rules]])", r.Name)
		}
	}
	return nil
}

// CreateApprovalRule adds a rule after the others, audited.
func (a *API) CreateApprovalRule(ctx context.Context, in ruleInput) (api.ApprovalRule, error) {
	c, err := authorize(ctx, auth.ScopeAdminApprovals)
	if err != nil {
		return api.ApprovalRule{}, err
	}
	var r approval.Rule
	if err := in.apply(&r); err != nil {
		return api.ApprovalRule{}, err
	}
	r.Approver = approverOf(r.Approver)
	if err := a.checkRule(r); err != nil {
		return api.ApprovalRule{}, err
	}
	s := store.ApprovalRule{Name: r.Name, Approver: r.Approver, Conditions: r.Conditions.Encode(), CreatedBy: c.Actor()}
	rec := audit.New(c.Actor(), c.IP, "approval.rule_create", "approval_rule", r.Name, audit.Success, ruleDetails(r))
	stored, err := a.store.CreateApprovalRule(ctx, s, &rec)
	if errors.Is(err, store.ErrDuplicate) {
		return api.ApprovalRule{}, web.Conflict("an approval rule named %q exists", r.Name)
	}
	if err != nil {
		return api.ApprovalRule{}, err
	}
	return ruleView(stored)
}

func ruleDetails(r approval.Rule) map[string]any {
	return map[string]any{"name": r.Name, "approver": r.Approver, "conditions": r.Conditions}
}

// apiRule refuses, for a change, a rule of the configuration.
func apiRule(id string) error {
	if strings.HasPrefix(id, configRulePrefix) {
		return web.Conflict("approval rule %s comes from the configuration ([[approval_rules]]): change it there and reload", id)
	}
	return nil
}

// PatchApprovalRule changes the fields given of an API rule, audited.
func (a *API) PatchApprovalRule(ctx context.Context, in ruleInput) (api.ApprovalRule, error) {
	c, err := authorize(ctx, auth.ScopeAdminApprovals)
	if err != nil {
		return api.ApprovalRule{}, err
	}
	if err := apiRule(in.ID); err != nil {
		return api.ApprovalRule{}, err
	}
	stored, err := a.store.UpdateApprovalRule(ctx, in.ID, func(s *store.ApprovalRule) (*audit.Record, error) {
		cond, err := approval.Decode(s.Conditions)
		if err != nil {
			return nil, err
		}
		r := approval.Rule{ID: s.ID, Name: s.Name, Approver: s.Approver, Conditions: cond}
		if err := in.apply(&r); err != nil {
			return nil, err
		}
		if err := a.checkRule(r); err != nil {
			return nil, err
		}
		s.Name, s.Approver, s.Conditions = r.Name, approverOf(r.Approver), r.Conditions.Encode()
		rec := audit.New(c.Actor(), c.IP, "approval.rule_update", "approval_rule", s.ID, audit.Success, ruleDetails(r))
		return &rec, nil
	})
	switch {
	case errors.Is(err, store.ErrNotFound):
		return api.ApprovalRule{}, web.NotFound("Approval rule not found: %s", in.ID)
	case errors.Is(err, store.ErrDuplicate):
		return api.ApprovalRule{}, web.Conflict("another approval rule has that name")
	case err != nil:
		return api.ApprovalRule{}, err
	}
	return ruleView(stored)
}

// DeleteApprovalRule deletes an API rule, audited; the requests it made
// keep its name.
func (a *API) DeleteApprovalRule(ctx context.Context, ref api.RuleRef) (api.Deleted, error) {
	c, err := authorize(ctx, auth.ScopeAdminApprovals)
	if err != nil {
		return api.Deleted{}, err
	}
	if err := apiRule(ref.ID); err != nil {
		return api.Deleted{}, err
	}
	rec := audit.New(c.Actor(), c.IP, "approval.rule_delete", "approval_rule", ref.ID, audit.Success, nil)
	err = a.store.DeleteApprovalRule(ctx, ref.ID, &rec)
	if errors.Is(err, store.ErrNotFound) {
		return api.Deleted{}, web.NotFound("Approval rule not found: %s", ref.ID)
	}
	if err != nil {
		return api.Deleted{}, err
	}
	return api.Deleted{Success: true, ID: ref.ID}, nil
}
