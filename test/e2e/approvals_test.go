package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/webhook/spec"
	. "github.com/simpletuner/simpletuner-orchestration/test/e2e/e2etest"
)

// approvalsTOML: two teams, and a rule holding every job of more than one GPU.
const approvalsTOML = `
[[teams]]
name = "alpha"
share = 1

[[teams]]
name = "bravo"
share = 1

[[approval_rules]]
name = "big-jobs"
gpus_over = 1
`

// scopedToken creates a token of team with scopes.
func scopedToken(t *testing.T, o *Orch, name, team string, scopes ...string) string {
	t.Helper()
	st, m := o.Do("POST", "/api/admin/tokens", map[string]any{"name": name, "scopes": scopes, "team": team})
	tok, _ := m["token"].(string)
	if st != 201 || tok == "" {
		t.Fatalf("create token %s: %d %v", name, st, m)
	}
	NoteSecret("token "+name, tok)
	return tok
}

// Real binaries, on SQLite and PostgreSQL: a member's two-GPU job waits for
// approval across a restart of the orchestrator; another team's lead cannot
// find it, the member cannot approve it, their lead does and it runs to the
// end; a second job is rejected and ends cancelled with the reason. Each step
// reaches the webhook subscriber (at least once), and the audit chain holds.
func TestApprovalsEndToEnd(t *testing.T) {
	t.Parallel()
	for _, engine := range []string{"sqlite", "postgres"} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			opt := OrchOptions{ExtraTOML: WebhookTOML + approvalsTOML}
			if engine == "postgres" {
				opt.DBURL = StartPG(t).URL
			}
			o := StartOrchestratorWith(t, opt)
			rc := StartReceiver(t, "")
			o.Subscribe(rc, "all", "job.*")
			member := o.As(scopedToken(t, o, "ann", "alpha", "queue.view", "queue.submit", "queue.cancel"))
			lead := o.As(scopedToken(t, o, "alpha-lead", "alpha", "queue.view", "queue.approve"))
			otherLead := o.As(scopedToken(t, o, "bravo-lead", "bravo", "queue.view", "queue.approve"))

			job := map[string]any{"steps": 3, "step_seconds": 0.05}
			st, m := member.Do("POST", "/api/queue/submit", map[string]any{"config": job, "gpu_count": 2})
			approval, _ := m["approval"].(map[string]any)
			if st != 201 || m["status"] != "pending_approval" || approval["rule"] != "big-jobs" {
				t.Fatalf("submit of 2 GPUs: %d %v", st, m)
			}
			id, req := m["job_id"].(string), int64(approval["request_id"].(float64))
			Eventually(t, 30*time.Second, "job.approval_requested delivered", func() bool {
				return slices.Contains(ByJob(rc.Accepted())[id], spec.JobApprovalRequested)
			})

			// Everything is in the database: a restart loses nothing.
			o.P.Kill9()
			o.Restart()
			if j := o.Job(id); j["status"] != "pending_approval" {
				t.Fatalf("after the restart the job is %v", j["status"])
			}

			approve := fmt.Sprintf("/api/approvals/requests/%d/approve", req)
			if st, m := otherLead.Do("POST", approve, nil); st != 404 {
				t.Fatalf("another team's lead approving: %d %v", st, m)
			}
			if st, m := member.Do("POST", approve, nil); st != 403 {
				t.Fatalf("the member approving their own job: %d %v", st, m)
			}
			o.StartWorker(WorkerSpec{Name: "pair", Persistent: true, StaticGPUs: 2})
			if st, m := lead.Do("POST", approve, map[string]any{"notes": "go ahead"}); st != 200 || m["status"] != "queued" {
				t.Fatalf("the lead approving: %d %v", st, m)
			}
			o.WaitJob(id, "completed", 60*time.Second)

			_, m = member.Do("POST", "/api/queue/submit", map[string]any{"config": job, "gpu_count": 2})
			second := m["job_id"].(string)
			if st, m := lead.Do("POST", "/api/queue/"+second+"/reject", map[string]any{"reason": "two GPUs for a smoke test"}); st != 200 {
				t.Fatalf("the lead rejecting: %d %v", st, m)
			}
			j := o.Job(second)
			if j["status"] != "cancelled" || !strings.HasSuffix(fmt.Sprint(j["error_message"]), ": two GPUs for a smoke test") {
				t.Fatalf("rejected job: %v %v", j["status"], j["error_message"])
			}

			want := map[string][]string{
				id:     {spec.JobApprovalRequested, spec.JobApproved, spec.JobQueued, spec.JobStarted, spec.JobCompleted},
				second: {spec.JobApprovalRequested, spec.JobRejected, spec.JobCancelled},
			}
			// At least once: an event delivered just before the kill may come
			// again after it, with the same ID, which receivers drop.
			var hooks []Hook
			Eventually(t, 60*time.Second, "every event delivered", func() bool {
				hooks = uniqueEvents(rc.Accepted())
				return len(hooks) >= 8
			})
			for jobID, events := range want {
				if got := ByJob(hooks)[jobID]; !slices.Equal(got, events) {
					t.Errorf("events of %s: %v, want %v", jobID, got, events)
				}
			}
			for _, h := range hooks {
				if h.Event == spec.JobRejected && (h.Payload.Job.Approval == nil || h.Payload.Job.Approval.Notes != "two GPUs for a smoke test") {
					t.Errorf("job.rejected without the reason: %s", h.Body)
				}
			}
			if st, v := o.Do("GET", "/api/admin/audit/verify", nil); st != 200 || v["ok"] != true {
				t.Fatalf("audit verify: %d %v", st, v)
			}
		})
	}
}

// uniqueEvents keeps the first delivery of each event ID.
func uniqueEvents(hs []Hook) []Hook {
	seen := map[string]bool{}
	var out []Hook
	for _, h := range hs {
		if !seen[h.EventID] {
			seen[h.EventID] = true
			out = append(out, h)
		}
	}
	return out
}
