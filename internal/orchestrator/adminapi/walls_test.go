package adminapi

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// Reading one job through the store anywhere but jobFor would skip the wall
// between teams: this package reads single jobs in jobfor.go only.
func TestOnlyJobForReadsAJob(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if name == "jobfor.go" || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "GetJob" {
				t.Errorf("%s: GetJob outside jobfor.go; read the job with jobFor, which checks the caller's team", fset.Position(sel.Pos()))
			}
			return true
		})
	}
}
