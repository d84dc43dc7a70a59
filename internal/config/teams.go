package config

import (
	"fmt"
	"regexp"
	"slices"
)

// DefaultTeam is the team of a token given none, and so of every job
// before teams were configured. It exists whether [[teams]] names it or not:
// not named, it has the whole fleet when it is the only team and no share
// of its own next to configured teams (its jobs run on GPUs no team wants).
const DefaultTeam = "default"

// Job priorities run from LowestPriority to HighestPriority; a submit that
// gives none gets DefaultPriority.
const (
	LowestPriority  = 0
	DefaultPriority = 10
	HighestPriority = 50
)

// TeamConfig is one [[teams]] entry: a team's share of the fleet's GPUs and
// its limits.
type TeamConfig struct {
	Name string `toml:"name"`
	// Share weighs the team against the others: its part of the fleet is
	// Share divided by the sum of every team's share.
	Share float64 `toml:"share"`
	// MaxGPUs is the most GPUs its jobs hold at once, MaxQueued the most
	// jobs it has queued; 0 is no limit.
	MaxGPUs   int `toml:"max_gpus"`
	MaxQueued int `toml:"max_queued"`
	// Borrow lets its jobs run beyond MaxGPUs on GPUs no other team's job
	// waits for; they are preempted first when one does.
	Borrow bool `toml:"borrow"`
	// MaxPriority is the highest priority its tokens may give a job; nil
	// is DefaultPriority (see PriorityLimit).
	MaxPriority *int `toml:"max_priority"`
}

// String shows the entry as a reload logs it, max_priority by its value.
func (t TeamConfig) String() string {
	return fmt.Sprintf("%s(share=%v, max_gpus=%d, max_queued=%d, borrow=%v, max_priority=%d)",
		t.Name, t.Share, t.MaxGPUs, t.MaxQueued, t.Borrow, t.PriorityLimit())
}

// PriorityLimit is the highest priority the team's tokens may submit with:
// max_priority, or DefaultPriority where it is not set, so that raising a
// job above the others is something an admin grants, not self-service.
func (t TeamConfig) PriorityLimit() int {
	if t.MaxPriority == nil {
		return DefaultPriority
	}
	return *t.MaxPriority
}

// teamName is what a team may be called: it appears in URLs, metrics
// labels and log lines.
var teamName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)

// CheckTeamName says what is wrong with a team's name, if anything.
func CheckTeamName(name string) error {
	if !teamName.MatchString(name) {
		return fmt.Errorf("%q is not a team name: 1 to 63 of a-z, 0-9, '_', '.', '-', starting with a letter or digit", name)
	}
	return nil
}

// TeamsOrDefault is the configured teams, with DefaultTeam (no limits)
// added when [[teams]] does not name it: with a share of 1 when it is the
// only team, of 0 next to configured teams, so that it does not take a part
// of the fleet nobody gave it (two teams of share 1 get half each).
func (c *Orchestrator) TeamsOrDefault() []TeamConfig {
	out := slices.Clone(c.Teams)
	if !slices.ContainsFunc(out, func(t TeamConfig) bool { return t.Name == DefaultTeam }) {
		share := 1.0
		if len(out) > 0 {
			share = 0
		}
		out = append(out, TeamConfig{Name: DefaultTeam, Share: share})
	}
	return out
}

func (l *loader) validateTeams(c *Orchestrator) {
	switch c.Jobs.Preemption {
	case "on", "off":
	default:
		l.errf("jobs.preemption", "want \"on\" or \"off\", got %q", c.Jobs.Preemption)
	}
	if c.Jobs.UsageHalfLife.Duration <= 0 {
		l.errf("jobs.usage_half_life", "must be longer than 0")
	}
	if l.failed["teams"] {
		return
	}
	var names []string
	for i, t := range c.Teams {
		at := func(format string, args ...any) { l.entryErrf("teams", i, format, args...) }
		if err := CheckTeamName(t.Name); err != nil {
			at("name: %v", err)
		} else if slices.Contains(names, t.Name) {
			at("name %q is used by an earlier entry", t.Name)
		}
		names = append(names, t.Name)
		if !(t.Share > 0) || t.Share > 1e6 {
			at("share: must be a positive number (at most 1000000), got %v", t.Share)
		}
		if t.MaxGPUs < 0 {
			at("max_gpus: must be 0 (no limit) or more, got %d", t.MaxGPUs)
		}
		if t.MaxQueued < 0 {
			at("max_queued: must be 0 (no limit) or more, got %d", t.MaxQueued)
		}
		if p := t.PriorityLimit(); p < LowestPriority || p > HighestPriority {
			at("max_priority: must be from %d to %d (a job's priorities), got %d", LowestPriority, HighestPriority, p)
		}
	}
}
