package orchestrator_test

import (
	"fmt"
	"testing"
)

// A misspelled submit field is accepted but named in the reply's warnings,
// with the field it most likely means; a known field in another case, or a
// body without extra fields, earns none.
func TestSubmitWarnsAboutUnknownFields(t *testing.T) {
	t.Parallel()
	e := setup(t, backends["sqlite"](t))
	r := e.Must(e.AdminDo("POST", "/api/queue/submit", map[string]any{"config": map[string]any{}, "priorty": 20,
		"Target": "worker", "provider": "x"}), 201)
	ws, _ := r.JSON["warnings"].([]any)
	want := []any{`unknown field "priorty" was ignored (did you mean "priority"?)`, `unknown field "provider" was ignored`}
	if fmt.Sprint(ws) != fmt.Sprint(want) {
		t.Errorf("warnings %v; want %v", ws, want)
	}
	j := e.Must(e.AdminDo("GET", "/api/queue/"+r.JSON["job_id"].(string), nil), 200)
	if j.JSON["priority"] != float64(10) || j.JSON["target"] != "worker" {
		t.Errorf("the misspelled field changed the job, or the known one in another case did not: %s", j.Body)
	}
	r = e.Must(e.AdminDo("POST", "/api/queue/submit", map[string]any{"config": map[string]any{}, "priority": 20}), 201)
	if _, ok := r.JSON["warnings"]; ok {
		t.Errorf("warnings for a clean body: %s", r.Body)
	}
}
