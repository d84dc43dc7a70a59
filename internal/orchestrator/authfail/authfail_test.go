package authfail

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
)

func detail(t *testing.T, r audit.Record) map[string]any {
	t.Helper()
	var d map[string]any
	if err := json.Unmarshal(r.Details, &d); err != nil {
		t.Fatalf("record details %s: %v", r.Details, err)
	}
	return d
}

// One record per client, most failures first, up to the limit, then one
// that sums up the rest; routes and tokens bounded, tokens only by accessor;
// a new interval starts empty.
func TestRecordsPerClientWithTheRestSummedUp(t *testing.T) {
	var g Gatherer
	if recs := g.Records(10); len(recs) != 0 {
		t.Fatalf("records of an empty interval: %v", recs)
	}
	var tried []string
	for i := range 30 {
		token := auth.NewAdminToken()
		tried = append(tried, token)
		g.Note("10.0.0.1", "10.0.0.1", fmt.Sprintf("/api/route%d", i%12), token, i >= 25)
	}
	for range 5 {
		g.Note("10.0.0.2", "10.0.0.2", "/api/queue", "", false)
	}
	g.Note("10.0.0.3", "10.0.0.3", "/api/queue", "", false)
	g.Note("10.0.0.4", "10.0.0.4", "/api/queue", "", false)

	recs := g.Records(2)
	if len(recs) != 3 {
		t.Fatalf("%d records, want 2 clients and 1 for the rest", len(recs))
	}
	top := detail(t, recs[0])
	if recs[0].TargetID != "10.0.0.1" || recs[0].ActorIP != "10.0.0.1" || recs[0].Action != "auth.failure" || top["failures"] != 30.0 || top["rate_limited"] != 5.0 {
		t.Fatalf("top record %+v %v", recs[0], top)
	}
	if routes := top["routes"].(map[string]any); len(routes) != maxRoutes {
		t.Fatalf("%d routes kept, want %d", len(routes), maxRoutes)
	}
	tokens := top["tokens"].([]any)
	for i, acc := range tokens {
		if acc != auth.Accessor(tried[i]) {
			t.Fatalf("token %d kept as %v, want its accessor", i, acc)
		}
	}
	if len(tokens) != maxTokens || strings.Contains(string(recs[0].Details), tried[0]) {
		t.Fatalf("tokens kept: %v (want %d accessors, no token)", tokens, maxTokens)
	}
	if recs[1].TargetID != "10.0.0.2" || detail(t, recs[1])["tokens"].([]any)[0] != "(none)" {
		t.Fatalf("second record %+v", recs[1])
	}
	rest := detail(t, recs[2])
	if recs[2].TargetID != "(others)" || rest["failures"] != 2.0 || rest["clients"] != 2.0 {
		t.Fatalf("rest record %+v %v", recs[2], rest)
	}
	if recs := g.Records(2); len(recs) != 0 {
		t.Fatalf("the next interval starts with %d records", len(recs))
	}
}

// Past maxPeers clients an interval only counts: the failures still reach
// the audit log, in the summing record.
func TestClientsPastTheBoundAreCounted(t *testing.T) {
	var g Gatherer
	for i := range maxPeers + 3 {
		g.Note(fmt.Sprintf("k%d", i), "", "/r", "", false)
	}
	recs := g.Records(maxPeers + 10)
	if len(recs) != maxPeers+1 {
		t.Fatalf("%d records, want %d clients and 1 for the rest", len(recs), maxPeers)
	}
	if rest := detail(t, recs[len(recs)-1]); rest["failures"] != 3.0 || rest["clients"] != 0.0 {
		t.Fatalf("rest record %v", rest)
	}
}
