// Package fairshare decides how teams share the fleet: each team's
// fair-share factor (its share of the fleet against its decayed GPU use),
// the order of the queue within a priority, the teams' GPU limits, and which
// running jobs to preempt for a waiting one. It reads a snapshot the
// scheduler takes at the start of a pass and changes nothing itself.
//
//   - Usage: the GPU-seconds of a team's ended attempts per day (as old as
//     the day's use on average), and of its running attempts so far, each
//     weighed by 2^(-age / half-life).
//   - Factor: 2^(-usage fraction / share fraction), as Slurm's classic fair
//     share: 1 for a team that used nothing, 0.5 for one that used exactly
//     its share, less for one that used more.
//   - Order: priority first, then the factor, then submission order.
//   - Preemption: a waiting job of a team under its share, whose factor is
//     at least twice the other's or whose priority is higher, may stop
//     jobs of a team over
//     its share (or beyond its GPU limit, borrowing), the fewest and most
//     recently started, each run at least min_runtime, and never so many
//     that the victim's team falls below its share.
package fairshare

import (
	"math"
	"slices"
	"strings"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/config"
)

// Team is a team's configuration.
type Team struct {
	Name      string
	Share     float64
	MaxGPUs   int // 0: no limit
	MaxQueued int // 0: no limit
	Borrow    bool
	// MaxPriority is the highest priority its tokens may submit with,
	// unless a token's own grant says otherwise.
	MaxPriority int
	// Configured is false for a team that has jobs but is not (or no
	// longer) in [[teams]]: it gets a share of 1 and no limits.
	Configured bool
}

// Policy is the teams and the preemption settings.
type Policy struct {
	Teams      []Team // by name; DefaultTeam is always there
	HalfLife   time.Duration
	Preemption bool
	MinRuntime time.Duration
}

// PolicyFrom reads [[teams]] and [jobs] of a validated configuration.
func PolicyFrom(cfg *config.Orchestrator) Policy {
	p := Policy{HalfLife: cfg.Jobs.UsageHalfLife.Duration, Preemption: cfg.Jobs.PreemptionOn(),
		MinRuntime: cfg.Jobs.MinRuntime.Duration}
	for _, t := range cfg.TeamsOrDefault() {
		p.Teams = append(p.Teams, Team{Name: t.Name, Share: t.Share, MaxGPUs: t.MaxGPUs, MaxQueued: t.MaxQueued,
			Borrow: t.Borrow, MaxPriority: t.PriorityLimit(), Configured: true})
	}
	slices.SortFunc(p.Teams, byName)
	return p
}

func byName(a, b Team) int { return strings.Compare(a.Name, b.Name) }

// Team returns a team's configuration; a team not configured gets a share
// of 1 and no limits, with Configured false.
func (p Policy) Team(name string) Team {
	if i := slices.IndexFunc(p.Teams, func(t Team) bool { return t.Name == name }); i >= 0 {
		return p.Teams[i]
	}
	return Team{Name: name, Share: 1, MaxPriority: config.DefaultPriority}
}

// Known reports whether name is a configured team (or the default team).
func (p Policy) Known(name string) bool { return p.Team(name).Configured }

// With returns p with the teams named added, unconfigured, where p lacks
// them: teams that still have jobs though the configuration dropped them.
func (p Policy) With(names []string) Policy {
	out := p
	out.Teams = slices.Clone(p.Teams)
	for _, n := range names {
		if !p.Known(n) {
			out.Teams = append(out.Teams, p.Team(n))
		}
	}
	slices.SortFunc(out.Teams, byName)
	return out
}

// Active reports whether teams change anything about scheduling: more than
// one team, or a team with a GPU limit. With one team and no limit the
// scheduler places jobs by priority and submission order alone, as before
// teams existed, and reads nothing more.
func (p Policy) Active() bool {
	return len(p.Teams) > 1 || slices.ContainsFunc(p.Teams, func(t Team) bool { return t.MaxGPUs > 0 })
}

// ReadsTeamQueues reports whether the teams' queues are read one by one:
// for scheduling (Active), or to count a team's queued jobs against its
// max_queued at submit.
func (p Policy) ReadsTeamQueues() bool {
	return p.Active() || slices.ContainsFunc(p.Teams, func(t Team) bool { return t.MaxQueued > 0 })
}

// Decay weighs GPU-seconds that are age old: half at one half-life.
func Decay(seconds float64, age, halfLife time.Duration) float64 {
	if age <= 0 || halfLife <= 0 {
		return seconds
	}
	return seconds * math.Exp2(-age.Seconds()/halfLife.Seconds())
}
