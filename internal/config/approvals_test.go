package config

import (
	"strings"
	"testing"
)

func TestApprovalRulesConfig(t *testing.T) {
	t.Parallel()
	c, _, err := loadO(t, `[[teams]]
name = "nlp"
share = 1

[[approval_rules]]
name = "big"
gpus_over = 4

[[approval_rules]]
name = "long"
approver = "admin"
gpu_hours_over = 100.0
seconds_per_step = 2.5
team = "nlp"
`, env())
	if err != nil {
		t.Fatal(err)
	}
	if len(c.ApprovalRules) != 2 {
		t.Fatalf("rules: %+v", c.ApprovalRules)
	}
	r := c.ApprovalRules[1].Rule()
	if r.Name != "long" || r.Approver != "admin" || r.GPUHoursOver != 100 || r.SecondsPerStep != 2.5 || r.Team != "nlp" {
		t.Fatalf("rule: %+v", r)
	}
}

func TestApprovalRulesConfigErrors(t *testing.T) {
	t.Parallel()
	rule := func(lines ...string) string { return "\n[[approval_rules]]\n" + strings.Join(lines, "\n") + "\n" }
	for _, tc := range []struct{ toml, want string }{
		{rule(`name = "x"`), `o.toml:2: key approval_rules: entry 1: set at least one condition`},
		{rule(`gpus_over = 1`), `entry 1: name: a name is 1 to 64 characters, got 0`},
		{rule(`name = "x"`, `gpus_over = -2`), `entry 1: gpus_over: must not be negative, got -2`},
		{rule(`name = "x"`, `gpus_over = 1`, `approver = "boss"`), `entry 1: approver: want "lead" or "admin", got "boss"`},
		{rule(`name = "x"`, `config_glob = "[a-"`), `entry 1: config_glob: "[a-" is not a valid glob`},
		{rule(`name = "x"`, `team = "ghost"`), `entry 1: team: "ghost" is not a [[teams]] name`},
		{rule(`name = "x"`, `gpus_over = 1`, `seconds_per_step = 3.0`), `entry 1: seconds_per_step: only means something with gpu_hours_over`},
		{rule(`name = "x"`, `gpus_over = "two"`), `entry 1: `},
		{rule(`name = "x"`, `colour = "red"`), `entry 1: unknown key "colour"`},
		{rule(`name = "x"`, `gpus_over = 1`) + rule(`name = "x"`, `first_job = true`), `o.toml:6: key approval_rules: entry 2: name "x" is used by an earlier entry`},
	} {
		_, _, err := loadO(t, tc.toml, env())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q:\n got  %v\n want %q", tc.toml, err, tc.want)
		}
	}
}
