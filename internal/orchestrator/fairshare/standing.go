package fairshare

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// Standing is where the teams stand at one moment: what each holds, its
// decayed usage and its factor. A scheduler pass takes one and counts in it
// what it places.
type Standing struct {
	Policy    Policy
	Now       time.Time
	FleetGPUs int
	teams     map[string]*TeamState
	shares    float64 // sum of the shares of the teams in it
}

// TeamState is one team's standing.
type TeamState struct {
	Team
	// ShareFraction is the team's share over the sum of the shares; the
	// factor weighs usage against it.
	ShareFraction float64
	// WorkFraction is the team's share over the sum of the shares of the
	// teams with work (jobs running or queued): its part of the fleet now.
	// A team with nothing to do leaves its part to the others.
	WorkFraction float64
	// Waiting: the team has jobs queued (see Waiting).
	Waiting bool
	// RunningJobs and RunningGPUs count its attempts out on workers;
	// LeavingGPUs those of them being preempted.
	RunningJobs, RunningGPUs, LeavingGPUs int
	// DecayedGPUSeconds is its usage; UsageFraction its part of everyone's.
	DecayedGPUSeconds float64
	UsageFraction     float64
	Factor            float64
}

// Entitled is how many of the fleet's GPUs the team's share gives it now,
// among the teams with work.
func (t *TeamState) Entitled(fleet int) float64 { return t.WorkFraction * float64(fleet) }

// hasWork reports whether the team runs or waits for anything.
func (t *TeamState) hasWork() bool { return t.RunningJobs > 0 || t.Waiting }

// holding is what the team holds and keeps: attempts being preempted are
// on their way out.
func (t *TeamState) holding() int { return t.RunningGPUs - t.LeavingGPUs }

// NewStanding computes the teams' standing at now from their usage by day
// (ended attempts) and the attempts out on workers.
func NewStanding(p Policy, days []store.TeamDay, active []store.ActiveAttempt, fleetGPUs int, now time.Time) *Standing {
	s := &Standing{Policy: p, Now: now, FleetGPUs: fleetGPUs, teams: map[string]*TeamState{}}
	for _, t := range p.Teams {
		s.team(t.Name)
	}
	for _, d := range days {
		s.team(d.Team).DecayedGPUSeconds += Decay(d.GPUSeconds, now.Sub(d.UsedAt), p.HalfLife)
	}
	for _, a := range active {
		t := s.team(a.Team)
		t.RunningJobs++
		t.RunningGPUs += a.GPUs
		if a.Preempting {
			t.LeavingGPUs += a.GPUs
		}
		if a.StartedAt != nil && now.After(*a.StartedAt) {
			ran := now.Sub(*a.StartedAt)
			t.DecayedGPUSeconds += Decay(float64(a.GPUs)*ran.Seconds(), ran/2, p.HalfLife)
		}
	}
	s.refresh()
	return s
}

// team returns name's state, adding the team (unconfigured) if need be.
func (s *Standing) team(name string) *TeamState {
	if name == "" {
		name = "default"
	}
	if t, ok := s.teams[name]; ok {
		return t
	}
	t := &TeamState{Team: s.Policy.Team(name)}
	s.teams[name] = t
	return t
}

// Waiting tells the standing which teams have jobs queued: with the teams
// that run jobs, they are the teams with work, which share the fleet.
func (s *Standing) Waiting(teams []string) {
	for _, name := range teams {
		s.team(name).Waiting = true
	}
	s.refresh()
}

// WaitingTeams lists the teams marked waiting, by name.
func (s *Standing) WaitingTeams() []string {
	var out []string
	for _, t := range s.Teams() {
		if t.Waiting {
			out = append(out, t.Name)
		}
	}
	return out
}

// refresh recomputes the fractions and factors.
func (s *Standing) refresh() {
	var usage, working float64
	withWork := 0
	s.shares = 0
	for _, t := range s.teams {
		s.shares += t.Share
		usage += t.DecayedGPUSeconds
		if t.hasWork() {
			working += t.Share
			withWork++
		}
	}
	for _, t := range s.teams {
		t.ShareFraction, t.WorkFraction = fraction(t.Share, s.shares), 0
		switch {
		case !t.hasWork():
		case working > 0:
			t.WorkFraction = t.Share / working
		default:
			// Only teams without a share (the unnamed default team) have
			// work: nobody else wants the fleet, so it is theirs.
			t.WorkFraction = 1 / float64(withWork)
		}
		t.UsageFraction, t.Factor = 0, 1
		if usage > 0 {
			t.UsageFraction = t.DecayedGPUSeconds / usage
			t.Factor = math.Exp2(-t.UsageFraction / t.ShareFraction)
		}
		if t.ShareFraction == 0 {
			// No share: its jobs go after every team's of their priority.
			t.Factor = 0
		}
	}
}

// fraction is part over whole, 0 for a whole of 0.
func fraction(part, whole float64) float64 {
	if whole == 0 {
		return 0
	}
	return part / whole
}

// Team returns a team's standing (a copy).
func (s *Standing) Team(name string) TeamState { return *s.team(name) }

// Teams returns every team's standing, by name.
func (s *Standing) Teams() []TeamState {
	out := make([]TeamState, 0, len(s.teams))
	for _, t := range s.teams {
		out = append(out, *t)
	}
	sortByName(out)
	return out
}

func sortByName(ts []TeamState) {
	slices.SortFunc(ts, func(a, b TeamState) int { return strings.Compare(a.Name, b.Name) })
}

// Before reports whether queued job a goes before b: higher priority, then
// the higher fair-share factor of its team, then submitted earlier.
func (s *Standing) Before(a, b store.QueuedJob) bool {
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	if a.Team != b.Team {
		if fa, fb := s.team(a.Team).Factor, s.team(b.Team).Factor; fa != fb {
			return fa > fb
		}
	}
	return a.Seq < b.Seq
}

// OverLimit reports whether placing j on gpus GPUs would take its team
// beyond its max_gpus.
func (s *Standing) OverLimit(j store.QueuedJob, gpus int) bool {
	t := s.team(j.Team)
	return t.MaxGPUs > 0 && t.RunningGPUs+gpus > t.MaxGPUs
}

// Took counts a job the pass placed on gpus GPUs.
func (s *Standing) Took(team string, gpus int) {
	t := s.team(team)
	t.RunningJobs++
	t.RunningGPUs += gpus
}

// JobGPUs is how many GPUs j takes on a worker with workerGPUs GPUs.
func JobGPUs(j store.QueuedJob, workerGPUs int) int {
	if j.WholeWorker {
		return workerGPUs
	}
	return j.GPUCount
}

// keeps is how many GPUs a team keeps however much others wait: its share
// of the fleet, or its max_gpus when that is less (GPUs beyond it are
// borrowed).
func (s *Standing) keeps(t *TeamState) float64 {
	keep := t.Entitled(s.FleetGPUs)
	if t.MaxGPUs > 0 && float64(t.MaxGPUs) < keep {
		keep = float64(t.MaxGPUs)
	}
	return keep
}

// clearlyAhead is how many times the victim's factor the waiting team's
// must be for a preemption by share: a team that has used nothing is
// always that far ahead of one that has used the fleet, but two teams whose
// usage has nearly evened out are not, and the GPUs change hands as jobs
// end rather than by stopping work. (Without it, on the two-team trace, the
// team that caught up was preempted back: half the preemptions.)
const clearlyAhead = 2

// Why says why waiting job j may preempt jobs of team victim, or "" when it
// may not: j's team is under its share, with a factor at least clearlyAhead
// times the victim's or with j of a higher priority than the victim's job,
// and the victim's team holds more than it keeps. A priority is never a way
// past the shares: a team at or over its share preempts nobody, whatever
// priority it was granted (see max_priority).
func (s *Standing) Why(j store.QueuedJob, victim store.ActiveAttempt) string {
	if j.Team == victim.Team || victim.Priority > j.Priority {
		return ""
	}
	w, v := s.team(j.Team), s.team(victim.Team)
	if float64(v.holding()) <= s.keeps(v) {
		return ""
	}
	if float64(w.holding()) >= w.Entitled(s.FleetGPUs) || (w.MaxGPUs > 0 && w.RunningGPUs >= w.MaxGPUs) {
		return ""
	}
	switch {
	case victim.Priority < j.Priority:
		return "priority " + strconv.Itoa(j.Priority) + " over " + strconv.Itoa(victim.Priority)
	case w.Factor >= clearlyAhead*v.Factor:
		return "team " + j.Team + " under its share"
	}
	return ""
}

// MayLose reports whether the victim's team can give up gpus more GPUs and
// still hold what it keeps.
func (s *Standing) MayLose(team string, gpus int) bool {
	t := s.team(team)
	return float64(t.holding()-gpus) >= s.keeps(t)-1e-9
}

// Leaving counts an attempt the scheduler has just chosen to preempt.
func (s *Standing) Leaving(a store.ActiveAttempt) {
	s.team(a.Team).LeavingGPUs += a.GPUs
}

// Preemptible reports whether a is a job that may be preempted at all: it
// runs (acknowledged), is not being preempted already, and ran at least
// min_runtime.
func (s *Standing) Preemptible(a store.ActiveAttempt) bool {
	return a.Status == protocol.JobRunning && !a.Preempting && a.StartedAt != nil &&
		s.Now.Sub(*a.StartedAt) >= s.Policy.MinRuntime
}
