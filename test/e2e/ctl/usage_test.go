package ctle2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/simpletuner/simpletuner-orchestration/test/e2e/e2etest"
)

// teamsTOML configures two teams beside the default one.
const teamsTOML = `[[teams]]
name = "vision"
share = 3
max_gpus = 8
borrow = true

[[teams]]
name = "nlp"
share = 1
max_queued = 10
`

// simpletunerctl with teams: a token made for a team, its jobs counted
// there, whoami and the token list saying so, and the usage report.
func TestTeamsAndUsage(t *testing.T) {
	t.Parallel()
	o := StartOrchestratorWith(t, OrchOptions{ExtraTOML: teamsTOML})
	c := overTCP(t, o)

	r := c.ok("tokens", "create", "--name", "vision-ci", "--scope", "queue.submit,queue.view", "--team", "vision")
	token := strings.TrimSpace(r.Stdout)
	c.secrets = append(c.secrets, token)
	mustContain(t, "tokens create --team", r.Stderr, "in team vision", "shown only once")
	r = c.want(1, "tokens", "create", "--name", "x", "--scope", "queue.view", "--team", "nope")
	mustContain(t, "unknown team", r.Stderr, `field "team"`, `"nope"`, "vision")
	mustContain(t, "tokens list", c.ok("tokens", "list").Stdout, "TEAM", "vision-ci", "vision")
	mustContain(t, "--team completion", c.ok("__complete", "tokens", "create", "--team", "").Stdout,
		"vision\tshare 75%", "nlp\tshare 25%", "default\tshare 0%")

	// The team's token submits; whoami, jobs -o wide and job show name the team.
	tokenFile := filepath.Join(t.TempDir(), "vision-token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	v := newCtl(t, map[string]string{"SIMPLETUNER_URL": o.URL, "CTL_TOKEN_FILE": tokenFile})
	v.secrets = c.secrets
	mustContain(t, "whoami", v.ok("whoami").Stdout, "Name:", "vision-ci", "Team:", "vision", "queue.submit", "Max priority:  10")
	// Above its team's max_priority (the default priority, as [[teams]] sets
	// none) the submit is refused and names the limit.
	r = v.want(1, "submit", "--config", writeFile(t, `{"steps": 1}`), "--priority", "30")
	mustContain(t, "submit above the grant", r.Stderr, `field "priority": 30 is above 10`, `max_priority of team "vision"`)
	id := strings.Fields(v.ok("submit", "--config", writeFile(t, `{"steps": 1}`)).Stdout)[2]
	mustContain(t, "job show", c.ok("job", id).Stdout, "Team:", "vision")
	mustContain(t, "jobs -o wide", c.ok("jobs", "-o", "wide").Stdout, "TEAM", id)

	r = c.ok("usage")
	mustContain(t, "usage", r.Stdout, "TEAM", "SHARE", "FAIRSHARE", "GPU-H", "vision", "nlp", "default", "preemption",
		"DAY", "VISION", "TOTAL", time.Now().UTC().Format("2006-01-02"))
	for _, l := range lines(r.Stdout) {
		if f := strings.Fields(l); len(f) > 4 && f[0] == "vision" {
			// 3 of 4 shares (the default team, not named in [[teams]], has
			// none); no job running; one queued of no limit; 0 of 8 GPUs.
			if f[1] != "75%" || f[2] != "0" || f[3] != "0/8" || f[4] != "1/-" {
				t.Errorf("usage's vision row: %q", l)
			}
		}
	}
	r = c.ok("usage", "--from", "2026-01-01", "--to", "2026-01-02", "-o", "json")
	var u struct {
		From, To string
		Teams    []struct {
			Team       string
			QueuedJobs int `json:"queued_jobs"`
			Days       []struct{ Day string }
		}
	}
	if err := json.Unmarshal([]byte(r.Stdout), &u); err != nil || u.From != "2026-01-01" || u.To != "2026-01-02" || len(u.Teams) != 3 ||
		len(u.Teams[0].Days) != 2 {
		t.Fatalf("usage -o json: %v\n%s", err, r.Stdout)
	}
	r = c.want(2, "usage", "--from", "1 Jan")
	mustContain(t, "bad --from", r.Stderr, `--from "1 Jan": want a day as YYYY-MM-DD`)
	r = c.want(1, "usage", "--from", "2020-01-01", "--to", "2026-01-01")
	mustContain(t, "a period too long", r.Stderr, "at most 366 days")
}
