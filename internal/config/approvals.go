package config

import (
	"errors"
	"slices"

	"github.com/simpletuner/simpletuner-orchestration/internal/approval"
)

// ApprovalRuleConfig is one [[approval_rules]] entry: a rule that holds a
// matching job at submit until a lead of its team (or an admin) approves
// it. Every condition set must match; the entries are checked in file
// order, before the rules made through the API.
type ApprovalRuleConfig struct {
	Name           string  `toml:"name"`
	Approver       string  `toml:"approver"` // "lead" (default) or "admin"
	GPUsOver       int     `toml:"gpus_over"`
	WholeWorker    bool    `toml:"whole_worker"`
	GPUHoursOver   float64 `toml:"gpu_hours_over"`
	SecondsPerStep float64 `toml:"seconds_per_step"`
	ConfigGlob     string  `toml:"config_glob"`
	FirstJob       bool    `toml:"first_job"`
	Team           string  `toml:"team"`
	JobsPerDayOver int     `toml:"jobs_per_day_over"`
}

// Rule is the entry as the approval package reads it.
func (r ApprovalRuleConfig) Rule() approval.Rule {
	return approval.Rule{Name: r.Name, Approver: r.Approver, Conditions: approval.Conditions{
		GPUsOver: r.GPUsOver, WholeWorker: r.WholeWorker, GPUHoursOver: r.GPUHoursOver, SecondsPerStep: r.SecondsPerStep,
		ConfigGlob: r.ConfigGlob, FirstJob: r.FirstJob, Team: r.Team, JobsPerDayOver: r.JobsPerDayOver}}
}

// validateApprovalRules checks every [[approval_rules]] entry, each
// problem at the entry's line and naming its field.
func (l *loader) validateApprovalRules(c *Orchestrator) {
	if l.failed["approval_rules"] {
		return
	}
	var teams, names []string
	for _, t := range c.Teams {
		teams = append(teams, t.Name)
	}
	for i, r := range c.ApprovalRules {
		at := func(format string, args ...any) { l.entryErrf("approval_rules", i, format, args...) }
		if err := r.Rule().Check(teams); err != nil {
			var joined interface{ Unwrap() []error }
			if errors.As(err, &joined) {
				for _, e := range joined.Unwrap() {
					at("%v", e)
				}
			} else {
				at("%v", err)
			}
		}
		if slices.Contains(names, r.Name) {
			at("name %q is used by an earlier entry", r.Name)
		}
		names = append(names, r.Name)
	}
}
