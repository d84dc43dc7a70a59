package ctle2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	. "github.com/simpletuner/simpletuner-orchestration/test/e2e/e2etest"
)

// peopleTOML maps the group ml-eng to member of the team nlp.
const peopleTOML = `
[[teams]]
name = "nlp"
share = 1

[[auth.groups]]
group = "ml-eng"
team = "nlp"
role = "member"
`

// simpletunerctl people: list the people with what they hold, disable one
// (their token is refused on its next use), enable them again.
func TestPeopleCommands(t *testing.T) {
	t.Parallel()
	stateDir := filepath.Join(t.TempDir(), "state")
	adaToken := SeedPerson(t, stateDir, DocPersonID, "ada")
	o := StartOrchestratorWith(t, OrchOptions{StateDir: stateDir, ExtraTOML: peopleTOML})
	c := overTCP(t, o)
	c.secrets = append(c.secrets, adaToken)

	adaFile := filepath.Join(t.TempDir(), "ada-token")
	if err := os.WriteFile(adaFile, []byte(adaToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ada := newCtl(t, map[string]string{"SIMPLETUNER_URL": o.URL, "CTL_TOKEN_FILE": adaFile})
	ada.secrets = c.secrets
	ada.ok("whoami")

	// admin runs simpletunerctl as c does and remembers the command line,
	// so that the docs' commands can be checked against what ran.
	ran := map[string]bool{}
	admin := func(args ...string) result {
		t.Helper()
		ran["simpletunerctl "+strings.Join(args, " ")] = true
		return c.ok(args...)
	}

	r := admin("people", "list")
	mustContain(t, "people list", r.Stdout, "ID", "USERNAME", "MEMBERSHIPS", "p_4k2m9x7q1z3a", "ada", "nlp:member", "active")
	r = admin("people", "list", "-o", "wide")
	mustContain(t, "people list -o wide", r.Stdout, "ada@example.com", "oidc", "nlp:member")
	mustContain(t, "people list --team nlp", admin("people", "list", "--team", "nlp").Stdout, "p_4k2m9x7q1z3a", "nlp:member")
	mustContain(t, "people list --team default", c.ok("people", "list", "--team", "default").Stdout, "nobody holds a role in team default")
	mustContain(t, "people list --team robotics", c.want(1, "people", "list", "--team", "robotics").Stderr, `unknown team "robotics"`)
	var list struct {
		People []struct {
			ID          string `json:"id"`
			Memberships []struct{ Team, Role string }
		} `json:"people"`
		Total int `json:"total"`
	}
	r = c.ok("people", "list", "-o", "json")
	if err := json.Unmarshal([]byte(r.Stdout), &list); err != nil || list.Total != 1 || list.People[0].ID != "p_4k2m9x7q1z3a" ||
		len(list.People[0].Memberships) != 1 || list.People[0].Memberships[0].Team != "nlp" {
		t.Fatalf("people list -o json: %v\n%s", err, r.Stdout)
	}

	// Disabling ends the person's token at once.
	r = admin("people", "disable", "p_4k2m9x7q1z3a")
	mustContain(t, "disable", r.Stdout, "person p_4k2m9x7q1z3a (ada) disabled: 1 tokens revoked, 0 dashboard sessions ended")
	ada.want(4, "whoami")
	mustContain(t, "list after disable", c.ok("people", "list").Stdout, "disabled")
	r = c.ok("people", "disable", "p_4k2m9x7q1z3a")
	mustContain(t, "disable again", r.Stdout, "0 tokens revoked")

	r = admin("people", "enable", "p_4k2m9x7q1z3a")
	mustContain(t, "enable", r.Stdout, "person p_4k2m9x7q1z3a (ada) enabled")
	mustContain(t, "list after enable", c.ok("people", "list").Stdout, "active")
	// Their revoked token stays revoked.
	ada.want(4, "whoami")

	c.want(3, "people", "disable", "p_nobodynobody")
	c.want(3, "people", "enable", "p_nobodynobody")
	c.want(2, "people", "disable")

	// The people calls need admin.people.
	viewerToken := strings.TrimSpace(c.ok("tokens", "create", "--name", "viewer", "--scope", "queue.view").Stdout)
	viewerFile := filepath.Join(t.TempDir(), "viewer-token")
	if err := os.WriteFile(viewerFile, []byte(viewerToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	viewer := newCtl(t, map[string]string{"SIMPLETUNER_URL": o.URL, "CTL_TOKEN_FILE": viewerFile})
	viewer.secrets = append(c.secrets, viewerToken)
	mustContain(t, "without admin.people", viewer.want(4, "people", "list").Stderr, "admin.people")

	// Every simpletunerctl people command that docs/auth.md and README.md
	// show ran here, as printed (less the README's comments).
	shownIn := regexp.MustCompile(`(?m)^\s*(simpletunerctl people [^#\n]*)`)
	for _, file := range []string{"docs/auth.md", "README.md"} {
		doc, err := os.ReadFile(filepath.Join("../../..", file))
		if err != nil {
			t.Fatal(err)
		}
		shown := shownIn.FindAllStringSubmatch(string(doc), -1)
		if len(shown) < 2 {
			t.Fatalf("%s shows %d simpletunerctl people commands; is the extraction broken?", file, len(shown))
		}
		for _, m := range shown {
			if line := strings.TrimSpace(m[1]); !ran[line] {
				t.Errorf("%s shows %q, which this test does not run", file, line)
			}
		}
	}
}
