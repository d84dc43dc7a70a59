package ctle2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	. "github.com/simpletuner/simpletuner-orchestration/test/e2e/e2etest"
)

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

// tokenCtl is simpletunerctl with a new token of team with scopes.
func tokenCtl(t *testing.T, o *Orch, name, team string, scopes ...string) (*ctl, string) {
	t.Helper()
	st, m := o.Do("POST", "/api/admin/tokens", map[string]any{"name": name, "scopes": scopes, "team": team})
	tok, _ := m["token"].(string)
	if st != 201 || tok == "" {
		t.Fatalf("create token %s: %d %v", name, st, m)
	}
	file := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(file, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := newCtl(t, map[string]string{"SIMPLETUNER_URL": o.URL, "CTL_TOKEN_FILE": file})
	c.secrets = append(c.secrets, tok, o.Admin)
	return c, tok
}

// simpletunerctl approvals: a lead lists the held jobs of the team,
// approves one by number and rejects one by job id; a member may not, and
// another team's lead finds nothing.
func TestApprovalsCommands(t *testing.T) {
	t.Parallel()
	o := StartOrchestratorWith(t, OrchOptions{ExtraTOML: approvalsTOML})
	_, memberToken := tokenCtl(t, o, "ann", "alpha", "queue.view", "queue.submit", "queue.cancel")
	member := o.As(memberToken)
	lead, _ := tokenCtl(t, o, "alpha-lead", "alpha", "queue.view", "queue.approve")
	other, _ := tokenCtl(t, o, "bravo-lead", "bravo", "queue.view", "queue.approve")
	annCtl, _ := tokenCtl(t, o, "ann-ctl", "alpha", "queue.view", "queue.submit")

	held := func() (string, int) {
		t.Helper()
		st, m := member.Do("POST", "/api/queue/submit", map[string]any{"config": map[string]any{"steps": 1}, "gpu_count": 2})
		if st != 201 || m["status"] != "pending_approval" {
			t.Fatalf("submit: %d %v", st, m)
		}
		return m["job_id"].(string), int(m["approval"].(map[string]any)["request_id"].(float64))
	}
	first, firstReq := held()
	second, _ := held()

	r := lead.ok("approvals", "list")
	mustContain(t, "approvals list", r.Stdout, "ID", "JOB", "RULE", first, second, "big-jobs", "asks for 2 GPUs, more than 1", "pending")
	mustContain(t, "bravo's list", other.ok("approvals", "list").Stdout, "no approval requests")
	mustContain(t, "bravo approving", other.want(3, "approvals", "approve", fmt.Sprint(firstReq)).Stderr, "Approval request not found")
	mustContain(t, "a member listing", annCtl.want(4, "approvals", "list").Stderr, "queue.approve")

	r = lead.ok("approvals", "approve", fmt.Sprint(firstReq), "--notes", "fine")
	mustContain(t, "approve", r.Stdout, fmt.Sprintf("request %d approved: job %s is queued", firstReq, first))
	mustContain(t, "reject without a reason", lead.want(2, "approvals", "reject", second).Stderr, "--reason is required")
	r = lead.ok("approvals", "reject", second, "--reason", "two GPUs for a smoke test")
	mustContain(t, "reject", r.Stdout, "rejected: job "+second+" is cancelled")
	mustContain(t, "approve again", lead.want(1, "approvals", "approve", fmt.Sprint(firstReq)).Stderr, "already approved")

	var all struct {
		Requests []map[string]any `json:"requests"`
	}
	if err := json.Unmarshal([]byte(lead.ok("approvals", "list", "--all", "-o", "json").Stdout), &all); err != nil || len(all.Requests) != 2 {
		t.Fatalf("approvals list --all -o json: %v %+v", err, all)
	}
	mustContain(t, "approvals list --status rejected", lead.ok("approvals", "list", "--status", "rejected").Stdout, second, "rejected")
}
