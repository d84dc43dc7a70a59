package dashboard

import (
	"net/http"
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/fairshare"
)

// A session made from a team's token sees the dashboard through its token:
// another team's job is missing from the queue, and its page, live log and
// cancel answer as for a job that does not exist.
func TestSessionsStayWithinTheirTeam(t *testing.T) {
	t.Parallel()
	s := newSite(t, openSQLite(t), func(o *orchestrator.Options) {
		cfg := config.DefaultOrchestrator()
		cfg.Teams = []config.TeamConfig{{Name: "alpha", Share: 1}, {Name: "bravo", Share: 1}}
		o.Teams = fairshare.PolicyFrom(cfg)
	})
	teamToken := func(name, team string) string {
		_, m := s.adminAPI("POST", "/api/admin/tokens", map[string]any{"name": name, "team": team,
			"scopes": []string{auth.ScopeQueueView, auth.ScopeQueueSubmit, auth.ScopeQueueCancel}})
		return m["token"].(string)
	}
	alpha, bravo := teamToken("alpha", "alpha"), teamToken("bravo", "bravo")
	_, m := s.api("POST", "/api/queue/submit", "Authorization", "Bearer "+bravo, map[string]any{"config": map[string]any{"steps": 1}})
	job := m["job_id"].(string)

	b := s.browser()
	b.mustSignIn(alpha)
	lacks(t, b.must(b.get("/ui/queue"), 200), job)
	contains(t, b.must(b.get("/ui/jobs/"+job), http.StatusNotFound), "Job not found")
	b.must(b.get("/ui/jobs/"+job+"/log"), http.StatusNotFound)
	b.must(b.post("/ui/jobs/"+job+"/cancel", nil), http.StatusNotFound)
	if _, m := s.adminAPI("GET", "/api/queue/"+job, nil); m["status"] != "queued" {
		t.Fatalf("another team's session changed the job: %v", m["status"])
	}

	// bravo's own session sees it.
	b = s.browser()
	b.mustSignIn(bravo)
	contains(t, b.must(b.get("/ui/queue"), 200), job)
	b.must(b.get("/ui/jobs/"+job), 200)
}
