package lifecycle

import (
	"flag"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the lifecycle section of docs/protocol.md")

const (
	docPath  = "../../docs/protocol.md"
	docBegin = "<!-- lifecycle:begin -->\n"
	docEnd   = "<!-- lifecycle:end -->"
)

// docs/protocol.md holds the lifecycle exactly as Markdown renders it from
// Moves: the page cannot drift from what the store enforces.
func TestProtocolDocShowsTheTable(t *testing.T) {
	b, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i, j := strings.Index(doc, docBegin), strings.Index(doc, docEnd)
	if i < 0 || j < i {
		t.Fatalf("%s lacks the %q … %q markers", docPath, docBegin, docEnd)
	}
	got, want := doc[i+len(docBegin):j], Markdown()
	if got == want {
		return
	}
	if *update {
		if err := os.WriteFile(docPath, []byte(doc[:i+len(docBegin)]+want+doc[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("the lifecycle in %s differs from the code; run go test ./internal/lifecycle -update\nwant:\n%s", docPath, want)
}
