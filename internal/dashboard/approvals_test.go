package dashboard

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/approval"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator"
)

// A held job's page offers a lead approve and reject forms; a viewer sees
// neither and is refused when posting anyway. Approved, the job is queued;
// rejected (a reason required), cancelled with the reason.
func TestJobPageApprovesAndRejects(t *testing.T) {
	t.Parallel()
	s := newSite(t, openSQLite(t), func(o *orchestrator.Options) {
		o.ApprovalRules = []approval.Rule{{Name: "big-jobs", Conditions: approval.Conditions{GPUsOver: 1}}}
	})
	held := func() string {
		t.Helper()
		st, m := s.adminAPI("POST", "/api/queue/submit", map[string]any{"config": map[string]any{"a": 1}, "gpu_count": 2})
		if st != 201 || m["status"] != "pending_approval" {
			t.Fatalf("submit: %d %v", st, m)
		}
		return m["job_id"].(string)
	}
	first, second := held(), held()

	viewer := s.browser()
	viewer.mustSignIn(s.token("viewer", "queue.view"))
	lacks(t, viewer.must(viewer.get("/ui/jobs/"+first), 200), "Approve", "Reject")
	viewer.must(viewer.post("/ui/jobs/"+first+"/approve", nil), http.StatusForbidden)

	b := s.browser()
	b.mustSignIn(s.admin)
	contains(t, b.must(b.get("/ui/jobs/"+first), 200), "pending_approval", "waiting for approval (rule big-jobs): asks for 2 GPUs, more than 1",
		`action="/ui/jobs/`+first+`/approve"`, "Reject")
	p := b.must(b.post("/ui/jobs/"+first+"/approve", url.Values{"notes": {"fine"}}), http.StatusSeeOther)
	contains(t, b.must(b.get(p.Location()), 200), "Approved: the job is queued.", "queued")

	contains(t, b.must(b.post("/ui/jobs/"+second+"/reject", nil), http.StatusBadRequest), "Rejection reason is required")
	p = b.must(b.post("/ui/jobs/"+second+"/reject", url.Values{"reason": {"too big"}}), http.StatusSeeOther)
	contains(t, b.must(b.get(p.Location()), 200), "Rejected: the job is cancelled.", ": too big")
}
