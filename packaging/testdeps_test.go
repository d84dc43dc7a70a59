package packaging

import (
	"os/exec"
	"strings"
	"testing"
)

// The binaries never link the test OpenID Provider or anything it pulls
// in: github.com/zitadel/ is for tests (internal/oidctest) only.
func TestBinariesLinkNoTestProvider(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "./cmd/simpletuner-orchestratord", "./cmd/simpletuner-workerd", "./cmd/simpletunerctl")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	var linked []string
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "github.com/zitadel/") || strings.HasSuffix(pkg, "/internal/oidctest") {
			linked = append(linked, pkg)
		}
	}
	if len(linked) > 0 {
		t.Fatalf("the binaries link test-only packages: %s", strings.Join(linked, ", "))
	}
	if !strings.Contains(string(out), "github.com/simpletuner/simpletuner-orchestration/internal/store\n") {
		t.Fatalf("go list -deps printed no store package; is the list right?\n%s", out)
	}
}
