package orchestrator_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// documentedRequest is a request docs/auth.md shows: "METHOD /path" and,
// on the next line, its JSON body if it has one.
var documentedRequest = regexp.MustCompile(`(?m)^(GET|POST|PUT|PATCH|DELETE) (/api/admin/people\S*)\n(\{.*\}\n)?`)

// Every request docs/auth.md shows for people runs, as printed, against a
// real orchestrator and succeeds.
func TestPeopleDocRequestsRun(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../docs/auth.md")
	if err != nil {
		t.Fatal(err)
	}
	reqs := documentedRequest.FindAllStringSubmatch(string(b), -1)
	if len(reqs) < 5 {
		t.Fatalf("docs/auth.md shows %d people requests; is the extraction broken?", len(reqs))
	}
	e := setup(t, backends["sqlite"](t), withPeople)
	e.signedInPerson()
	for _, r := range reqs {
		var body any
		if r[3] != "" {
			body = strings.TrimSpace(r[3])
		}
		if got := e.AdminDo(r[1], r[2], body); got.Status/100 != 2 {
			t.Errorf("docs/auth.md: %s %s: HTTP %d: %s", r[1], r[2], got.Status, got.Body)
		}
	}
}
