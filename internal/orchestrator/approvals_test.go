package orchestrator_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/approval"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/orchtest"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// withApprovalRules sets [[approval_rules]].
func withApprovalRules(rules ...approval.Rule) func(*orchestrator.Options) {
	return func(o *orchestrator.Options) { o.ApprovalRules = rules }
}

// asWith makes a request with token and a JSON body.
func (e *env) asWith(token, method, path string, body any) orchtest.Reply {
	e.t.Helper()
	return e.Do(method, path, map[string]string{"Authorization": "Bearer " + token}, body)
}

// approvalTeams are alpha and bravo with a rule holding jobs of more than
// one GPU, a member and a lead of alpha, and a lead of bravo.
type approvalTeams struct {
	*env
	member, lead, bravoLead string
}

func setupApprovals(t *testing.T, st store.Store) approvalTeams {
	e := setup(t, st, withWalledTeams(), withApprovalRules(approval.Rule{Name: "big", Conditions: approval.Conditions{GPUsOver: 1}}))
	return approvalTeams{env: e,
		member:    e.scopedToken("alpha-member", "alpha", "queue.view", "queue.submit", "queue.cancel"),
		lead:      e.scopedToken("alpha-lead", "alpha", "queue.view", "queue.submit", "queue.approve"),
		bravoLead: e.scopedToken("bravo-lead", "bravo", "queue.view", "queue.approve"),
	}
}

// held submits a two-GPU job as token: the rule holds it.
func (e approvalTeams) held(token string) (jobID string, requestID int64) {
	e.t.Helper()
	r := e.Must(e.submitAs(token, map[string]any{"gpu_count": 2}), 201).JSON
	a, _ := r["approval"].(map[string]any)
	if r["status"] != "pending_approval" || r["requires_approval"] != true || a == nil || a["rule"] != "big" ||
		a["reason"] != "asks for 2 GPUs, more than 1" {
		e.t.Fatalf("submit of 2 GPUs: %v", r)
	}
	return r["job_id"].(string), int64(a["request_id"].(float64))
}

func TestApprovalHoldsAJobUntilALeadApproves(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setupApprovals(t, open(t))
		if r := e.Must(e.submitAs(e.member, map[string]any{"gpu_count": 1}), 201).JSON; r["status"] != "queued" || r["approval"] != nil {
			t.Fatalf("one GPU is not held: %v", r)
		}
		job, id := e.held(e.member)
		if j := e.Job(job); j["status"] != "pending_approval" || j["error_message"] != "waiting for approval (rule big): asks for 2 GPUs, more than 1" {
			t.Fatalf("held job: %v, %v", j["status"], j["error_message"])
		}
		if r := e.Must(e.as(e.member, "GET", "/api/queue?status=blocked"), 200).JSON; len(jobIDsOf(r)) != 1 {
			t.Fatalf("status=blocked lists %v", r)
		}

		list := e.Must(e.as(e.lead, "GET", "/api/approvals/requests?pending_only=true"), 200).JSON
		reqs := list["requests"].([]any)
		if len(reqs) != 1 || list["pending_count"] != float64(1) {
			t.Fatalf("alpha lead's list: %v", list)
		}
		got := reqs[0].(map[string]any)
		if got["id"] != float64(id) || got["job_id"] != job || got["rule_name"] != "big" || got["status"] != "pending" ||
			got["team"] != "alpha" || got["job_status"] != "pending_approval" || got["reviewed_by"] != nil {
			t.Fatalf("request %v", got)
		}
		if r := e.Must(e.as(e.bravoLead, "GET", "/api/approvals/requests"), 200).JSON; len(r["requests"].([]any)) != 0 || r["pending_count"] != float64(0) {
			t.Fatalf("bravo lead sees alpha's requests: %v", r)
		}
		e.Must(e.as(e.lead, "GET", "/api/approvals/requests/pending/count"), 200)
		e.Must(e.as(e.member, "GET", fmt.Sprintf("/api/approvals/requests/%d", id)), 200)
		e.Must(e.as(e.member, "GET", "/api/approvals/requests/job/"+job), 200)

		// Another team's lead finds no such request: the same answer as an
		// unknown number, byte for byte.
		approve := fmt.Sprintf("/api/approvals/requests/%d/approve", id)
		hidden := e.as(e.bravoLead, "POST", approve)
		unknown := e.as(e.bravoLead, "POST", "/api/approvals/requests/999999/approve")
		want := bytes.ReplaceAll(unknown.Body, []byte("999999"), []byte(fmt.Sprint(id)))
		if hidden.Status != 404 || unknown.Status != 404 || !bytes.Equal(hidden.Body, want) {
			t.Fatalf("bravo lead approving: HTTP %d %s; unknown: HTTP %d %s", hidden.Status, hidden.Body, unknown.Status, unknown.Body)
		}
		if r := e.as(e.bravoLead, "POST", "/api/queue/"+job+"/approve"); r.Status != 404 {
			t.Fatalf("bravo lead approving by job: HTTP %d %s", r.Status, r.Body)
		}
		// A member holds no queue.approve: not even their own job.
		if r := e.as(e.member, "POST", approve); r.Status != 403 || !strings.Contains(string(r.Body), "queue.approve") {
			t.Fatalf("member approving: HTTP %d %s", r.Status, r.Body)
		}
		if st := e.Job(job)["status"]; st != "pending_approval" {
			t.Fatalf("refused approvals moved the job: %v", st)
		}

		r := e.Must(e.asWith(e.lead, "POST", approve, map[string]any{"notes": "fine for this week"}), 200).JSON
		if r["success"] != true || r["status"] != "queued" || r["approved_by"] != "admin:"+tokenID(e.env, "alpha-lead") || r["job_id"] != job {
			t.Fatalf("approve: %v", r)
		}
		if j := e.Job(job); j["status"] != "queued" || j["error_message"] != nil {
			t.Fatalf("approved job: %v, %v", j["status"], j["error_message"])
		}
		if r := e.as(e.lead, "POST", approve); r.Status != 409 || !strings.Contains(string(r.Body), "already approved") {
			t.Fatalf("approving again: HTTP %d %s", r.Status, r.Body)
		}
		got = e.Must(e.as(e.lead, "GET", "/api/approvals/requests/job/"+job), 200).JSON
		if got["status"] != "approved" || got["review_notes"] != "fine for this week" || got["reviewed_at"] == nil {
			t.Fatalf("decided request %v", got)
		}
		auditHas(t, e.env, "approval.approve", "approval.refused", "job.submit")
	})
}

func TestApprovalRejectCancelsWithTheReason(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setupApprovals(t, open(t))
		job, id := e.held(e.member)
		reject := fmt.Sprintf("/api/approvals/requests/%d/reject", id)
		if r := e.as(e.lead, "POST", reject); r.Status != 400 || !strings.Contains(string(r.Body), "Rejection reason is required") {
			t.Fatalf("reject without a reason: HTTP %d %s", r.Status, r.Body)
		}
		r := e.Must(e.as(e.lead, "POST", "/api/queue/"+job+"/reject?reason=two+GPUs+for+a+smoke+test"), 200).JSON
		if r["status"] != "cancelled" || r["rejected_by"] == nil {
			t.Fatalf("reject: %v", r)
		}
		j := e.Job(job)
		if j["status"] != "cancelled" || !strings.HasSuffix(fmt.Sprint(j["error_message"]), ": two GPUs for a smoke test") ||
			!strings.HasPrefix(fmt.Sprint(j["error_message"]), "rejected by admin:") {
			t.Fatalf("rejected job: status %v error %v", j["status"], j["error_message"])
		}
		if r := e.as(e.lead, "POST", fmt.Sprintf("/api/approvals/requests/%d/approve", id)); r.Status != 409 {
			t.Fatalf("approving a rejected request: HTTP %d %s", r.Status, r.Body)
		}
		auditHas(t, e.env, "approval.reject")
	})
}

// A lead may not approve their own job, nor a job a rule leaves to
// admins; the fleet admin may. A held job cancelled cancels its request.
func TestApprovalRefusalsAndCancel(t *testing.T) {
	t.Parallel()
	e := setupApprovals(t, backends["sqlite"](t))
	own, ownID := e.held(e.lead)
	if r := e.as(e.lead, "POST", fmt.Sprintf("/api/approvals/requests/%d/approve", ownID)); r.Status != 403 ||
		!strings.Contains(string(r.Body), "your own job") {
		t.Fatalf("self-approval: HTTP %d %s", r.Status, r.Body)
	}
	e.Must(e.AdminDo("POST", "/api/queue/"+own+"/approve", nil), 200)

	job, id := e.held(e.member)
	e.Must(e.as(e.member, "POST", "/api/queue/"+job+"/cancel"), 200)
	got := e.Must(e.as(e.lead, "GET", fmt.Sprintf("/api/approvals/requests/%d", id)), 200).JSON
	if got["status"] != "cancelled" || got["job_status"] != "cancelled" {
		t.Fatalf("request of a cancelled job: %v", got)
	}
	if r := e.as(e.lead, "POST", fmt.Sprintf("/api/approvals/requests/%d/approve", id)); r.Status != 409 {
		t.Fatalf("approving a cancelled job's request: HTTP %d %s", r.Status, r.Body)
	}
}

// Rules made through the API are checked after the configuration's, are
// an admin's to change, and each change is audited; the configuration's
// are read-only.
func TestApprovalRulesThroughTheAPI(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setupApprovals(t, open(t))
		if r := e.asWith(e.lead, "POST", "/api/approvals/rules", map[string]any{"name": "first", "first_job": true}); r.Status != 403 {
			t.Fatalf("a lead creating a rule: HTTP %d %s", r.Status, r.Body)
		}
		for body, want := range map[string]string{
			`{"name":"x"}`:                                    "set at least one condition",
			`{"name":"x","gpus_over":-1}`:                     "gpus_over: must not be negative",
			`{"name":"x","gpus_over":"two"}`:                  `field "gpus_over"`,
			`{"name":"x","colour":"red"}`:                     `unknown field "colour"`,
			`{"name":"x","team":"ghost"}`:                     `team: "ghost" is not a [[teams]] name`,
			`{"name":"big","first_job":true}`:                 "comes from the configuration",
			`{"name":"x","approver":"boss","first_job":true}`: `approver: want "lead" or "admin"`,
		} {
			if r := e.AdminDo("POST", "/api/approvals/rules", body); r.Status/100 != 4 || !strings.Contains(fmt.Sprint(r.JSON["detail"]), want) {
				t.Errorf("%s: HTTP %d %s, want %q", body, r.Status, r.Body, want)
			}
		}
		created := e.Must(e.AdminDo("POST", "/api/approvals/rules", map[string]any{"name": "team-bravo", "team": "bravo", "approver": "admin"}), 201).JSON
		id := created["id"].(string)
		if created["source"] != "api" || created["team"] != "bravo" || created["approver"] != "admin" {
			t.Fatalf("created %v", created)
		}
		rules := e.Must(e.as(e.member, "GET", "/api/approvals/rules"), 200).JSON["rules"].([]any)
		if len(rules) != 2 || rules[0].(map[string]any)["id"] != "config:big" || rules[1].(map[string]any)["id"] != id {
			t.Fatalf("rules in order: %v", rules)
		}
		if r := e.AdminDo("PATCH", "/api/approvals/rules/config:big", map[string]any{"gpus_over": 8}); r.Status != 409 {
			t.Fatalf("changing a config rule: HTTP %d %s", r.Status, r.Body)
		}
		patched := e.Must(e.AdminDo("PATCH", "/api/approvals/rules/"+id, map[string]any{"whole_worker": true}), 200).JSON
		if patched["team"] != "bravo" || patched["whole_worker"] != true {
			t.Fatalf("patched %v", patched)
		}
		e.Must(e.AdminDo("PATCH", "/api/approvals/rules/"+id, map[string]any{"whole_worker": false}), 200)
		// A one-GPU job of bravo now waits, for an admin.
		bravoMember := e.scopedToken("bravo-member", "bravo", "queue.view", "queue.submit")
		r := e.Must(e.submitAs(bravoMember, nil), 201).JSON
		if r["status"] != "pending_approval" || r["approval"].(map[string]any)["rule"] != "team-bravo" {
			t.Fatalf("bravo's job: %v", r)
		}
		if r := e.as(e.bravoLead, "POST", "/api/queue/"+r["job_id"].(string)+"/approve"); r.Status != 403 ||
			!strings.Contains(string(r.Body), "for an admin to decide") {
			t.Fatalf("a lead approving an admin's rule: HTTP %d %s", r.Status, r.Body)
		}
		e.Must(e.AdminDo("DELETE", "/api/approvals/rules/"+id, nil), 200)
		e.Must(e.AdminDo("GET", "/api/approvals/rules/"+id, nil), 404)
		auditHas(t, e.env, "approval.rule_create", "approval.rule_update", "approval.rule_delete")
	})
}

// tokenID is the ID of the admin token named name.
func tokenID(e *env, name string) string {
	e.t.Helper()
	for _, tok := range e.Must(e.AdminDo("GET", "/api/admin/tokens", nil), 200).JSON["tokens"].([]any) {
		if m := tok.(map[string]any); m["name"] == name {
			return m["id"].(string)
		}
	}
	e.t.Fatalf("no token %q", name)
	return ""
}

// auditHas fails unless the audit log holds each action.
func auditHas(t *testing.T, e *env, actions ...string) {
	t.Helper()
	for _, a := range actions {
		log := string(e.Must(e.AdminDo("GET", "/api/admin/audit?action="+a, nil), 200).Body)
		if !strings.Contains(log, `"action":"`+a+`"`) {
			t.Errorf("the audit log has no %s", a)
		}
	}
}
