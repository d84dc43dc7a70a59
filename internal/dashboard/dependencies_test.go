package dashboard

import (
	"testing"
)

// A waiting job's page says what it waits for and links each job it
// depends on; a cancel from the page ends it.
func TestJobPageShowsDependencies(t *testing.T) {
	t.Parallel()
	s := newSite(t, openSQLite(t))
	submit := func(body map[string]any) string {
		t.Helper()
		body["config"] = map[string]any{"a": 1}
		st, m := s.adminAPI("POST", "/api/queue/submit", body)
		if st != 201 {
			t.Fatalf("submit: %d %v", st, m)
		}
		return m["job_id"].(string)
	}
	first := submit(map[string]any{})
	waiting := submit(map[string]any{"depends_on": []map[string]any{{"job_id": first, "when": "any"}}, "on_unmet": "hold"})

	b := s.browser()
	b.mustSignIn(s.admin)
	contains(t, b.must(b.get("/ui/jobs/"+waiting), 200), "waiting", `data-waiting="dependency"`,
		"Waiting: it waits for "+first+" to end (queued now)", `href="/ui/jobs/`+first+`"`, "to end:", "pending",
		"Held, not cancelled, if one is never met.", `action="/ui/jobs/`+waiting+`/cancel"`)
	contains(t, b.must(b.get("/ui/queue?status=waiting"), 200), waiting)
}
