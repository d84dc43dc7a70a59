package orchestrator_test

import (
	"os"
	"strings"
	"testing"
)

// Every route the router serves is documented in docs/protocol.md, under the
// name Route.DocName gives it ("POST /api/workers/register").
func TestProtocolDocCoversEveryRoute(t *testing.T) {
	b, err := os.ReadFile("../../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	e := setup(t, backends["sqlite"](t))
	routes := e.srv.Routes()
	if len(routes) < 20 {
		t.Fatalf("only %d routes", len(routes))
	}
	for _, r := range routes {
		if name := r.DocName(); !strings.Contains(doc, name) {
			t.Errorf("docs/protocol.md does not document %s", name)
		}
	}
	if !strings.Contains(doc, "GET /metrics") {
		t.Error("docs/protocol.md does not document GET /metrics")
	}
}
