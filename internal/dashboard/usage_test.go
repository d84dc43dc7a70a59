package dashboard

import (
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/fairshare"
)

// withTeams configures the teams "vision" (three shares, at most 8 GPUs,
// borrowing) and "nlp" beside the default team, as [[teams]] does.
func withTeams(o *orchestrator.Options) {
	o.Teams.Teams = append(o.Teams.Teams,
		fairshare.Team{Name: "vision", Share: 3, MaxGPUs: 8, MaxQueued: 20, Borrow: true, Configured: true},
		fairshare.Team{Name: "nlp", Share: 1, Configured: true})
}

// The usage page shows each team with its share and limits and what it
// queues, then the GPU-hours per day; a bad day is refused beside its field.
func TestUsagePage(t *testing.T) {
	t.Parallel()
	s := newSite(t, openSQLite(t), withTeams)
	code, tok := s.adminAPI("POST", "/api/admin/tokens", map[string]any{"name": "vision-ci", "scopes": []string{"queue.submit"}, "team": "vision"})
	if code != 201 || tok["team"] != "vision" {
		t.Fatalf("create a vision token: %d %v", code, tok)
	}
	code, job := s.api("POST", "/api/queue/submit", "Authorization", "Bearer "+tok["token"].(string),
		map[string]any{"config": map[string]any{"a": 1}})
	if code != 201 {
		t.Fatalf("submit as vision: %d %v", code, job)
	}
	b := s.browser()
	b.mustSignIn(s.admin)
	contains(t, b.must(b.get("/ui/"), 200), `href="/ui/usage"`)

	p := b.must(b.get("/ui/usage"), 200)
	contains(t, p, `href="/ui/usage" aria-current="page"`, `data-team="vision"`, `data-team="nlp"`, `data-team="default"`,
		"GPU-hours per day", "preemption")
	// vision: 3 of 5 shares, at most 8 GPUs (borrowing), 20 queued, one job queued.
	contains(t, p, `<td data-label="Share">60% <small>(3)</small></td>`, `8 <small>borrows</small>`,
		`<td data-label="Max queued">20</td>`, `<td data-label="Queued">1</td>`, `<td data-label="Fair share">1.000</td>`)

	// The job's page names its team.
	contains(t, b.must(b.get("/ui/jobs/"+job["job_id"].(string)), 200), `<dd data-team="vision"><a href="/ui/usage">vision</a></dd>`)

	p = b.must(b.get("/ui/usage?from=2026-01-01&to=2026-01-03"), 200)
	contains(t, p, `data-day="2026-01-01"`, `data-day="2026-01-03"`, "2026-01-01 to 2026-01-03")
	lacks(t, p, `data-day="2026-01-04"`)

	p = b.must(b.get("/ui/usage?from=yesterday"), 422)
	contains(t, p, `id="u-from-error"`, `query parameter &#34;from&#34; must be a day`, `value="yesterday"`)
	lacks(t, p, `data-team=`)

	// A token without queue.view sees no link, and a refusal.
	v := s.browser()
	v.mustSignIn(s.token("workers-only", auth.ScopeAdminWorkers))
	lacks(t, v.must(v.get("/ui/"), 200), `href="/ui/usage"`)
	contains(t, v.must(v.get("/ui/usage"), 403), "Your token may not do this")
}
