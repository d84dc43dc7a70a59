package scheduler

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/lifecycle"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/fairshare"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/placement"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// This file is the teams' step of a pass: their standing (package
// fairshare) as the queue's order, and the preemptions it chooses.

// preemptWeighed is how many jobs that found no room one pass weighs for
// preemption.
const preemptWeighed = 16

// usageRefresh is how long the teams' usage of past days is reused between
// passes: it changes slowly, and reading it on every pass would be waste.
const usageRefresh = 10 * time.Second

// teamsNow is what a pass knows of the teams.
type teamsNow struct {
	s      *Scheduler
	st     *fairshare.Standing
	active []store.ActiveAttempt
	// mayPreempt: this pass may preempt (on, due, and no earlier preemption
	// still under way).
	mayPreempt bool
}

// The teams' standing as the order of a pass: each team's queue merged by
// priority, fair-share factor and submission order; max_gpus holds jobs
// back; running jobs of teams over their share yield to waiting ones.

// queue reads each team's queue, merged by priority, fair-share factor
// and submission order.
func (t *teamsNow) queue(ctx context.Context) queue {
	m := &mergedQueue{st: t.st}
	for _, tm := range t.st.Teams() {
		m.readers = append(m.readers, &queueReader{st: t.s.Store, noteStore: t.s.NoteStore, ctx: ctx, team: tm.Name, byTeam: true})
	}
	m.heads = make([]*store.QueuedJob, len(m.readers))
	// Which teams wait decides each team's part of the fleet, and so the
	// order: every team's head is read before the first job is chosen.
	m.readHeads()
	t.st.Waiting(m.waitingTeams())
	return m
}

func (t *teamsNow) overLimit(j store.QueuedJob, n int) bool { return t.st.OverLimit(j, n) }
func (t *teamsNow) borrows(j store.QueuedJob) bool          { return t.st.Team(j.Team).Borrow }
func (t *teamsNow) took(j store.QueuedJob, n int)           { t.st.Took(j.Team, n) }
func (t *teamsNow) reordersReservation() bool               { return true }
func (t *teamsNow) weighsVictims() bool                     { return t.mayPreempt }

// preempt weighs victims against the attempts out on workers now, read
// again: the pass's standing was read before its queue, and a job
// acknowledged in between (or placed by this pass) must count as it is, or
// the victim would be chosen among those that happened to run earlier.
func (t *teamsNow) preempt(ctx context.Context, s *Scheduler, waiting []store.QueuedJob) {
	active, err := s.Store.ListActiveAttempts(ctx)
	if err != nil || slices.ContainsFunc(active, func(a store.ActiveAttempt) bool { return a.Preempting }) {
		return
	}
	now := time.Now().UTC()
	p := t.st.Policy
	st := fairshare.NewStanding(p, s.pastUsage(ctx, p, now), active, t.st.FleetGPUs, now)
	st.Waiting(t.st.WaitingTeams())
	s.preemptFor(ctx, &teamsNow{s: s, st: st, active: active, mayPreempt: true}, waiting)
}

// teamCache holds what passes reuse: the policy with the teams that have
// jobs, computed once per configuration; the usage of past days, for
// usageRefresh; and when preemption was last weighed.
type teamCache struct {
	mu          sync.Mutex
	forOptions  *Options
	policy      fairshare.Policy
	readAt      time.Time
	days        []store.TeamDay
	lastPreempt time.Time
	// indexed: the team queue index is known to exist.
	indexed bool
	// wakeArmed: a wake-up for the next preemption weighing is set.
	wakeArmed bool
	// fleet is the fleet's GPUs as read at fleetAt.
	fleet   int
	fleetAt time.Time
}

// teamPolicy is the configured teams plus those that still have jobs
// though the configuration no longer names them (so that their jobs are
// read and run), refreshed when the configuration changes.
func (s *Scheduler) teamPolicy(ctx context.Context) fairshare.Policy {
	opt := s.opt.Load()
	c := &s.teams
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.forOptions != opt {
		names, err := s.Store.TeamsWithJobs(ctx)
		if err != nil {
			return opt.Teams
		}
		c.forOptions, c.policy = opt, opt.Teams.With(names)
		if c.policy.ReadsTeamQueues() && !c.indexed {
			s.ensureTeamQueueIndex(ctx)
		}
	}
	return c.policy
}

// ensureTeamQueueIndex makes the index of the teams' queues the first time
// they are read; the caller holds s.teams.mu. Without it the queries still
// answer, reading the whole queue, so a failure is logged and tried again
// at the next change of configuration.
func (s *Scheduler) ensureTeamQueueIndex(ctx context.Context) {
	start := time.Now()
	if err := s.Store.EnsureTeamQueueIndex(ctx); err != nil {
		s.Log.Warn("could not make the index of the teams' queues; they are read without it", "err", err)
		return
	}
	s.teams.indexed = true
	s.Log.Info("the index of the teams' queues is in place", "took", time.Since(start).Round(time.Millisecond))
}

// teamsNow takes the teams' standing for a pass; nil when teams change
// nothing (one team, no GPU limit).
func (s *Scheduler) teamsNow(ctx context.Context) *teamsNow {
	p := s.teamPolicy(ctx)
	if !p.Active() {
		return nil
	}
	active, err := s.Store.ListActiveAttempts(ctx)
	if err != nil {
		return nil
	}
	// Taken after the read: every attempt read started no later than now.
	now := time.Now().UTC()
	preempt := p.Preemption && !slices.ContainsFunc(active, func(a store.ActiveAttempt) bool { return a.Preempting }) &&
		s.preemptionDue(now)
	fleet, err := s.cachedFleetGPUs(ctx, now)
	if err != nil {
		preempt = false
	}
	return &teamsNow{s: s, st: fairshare.NewStanding(p, s.pastUsage(ctx, p, now), active, fleet, now), active: active, mayPreempt: preempt}
}

// fleetRefresh is how long the fleet's GPU count is reused between passes.
const fleetRefresh = time.Second

// cachedFleetGPUs is store.FleetGPUs read at most every fleetRefresh (and again
// while it is 0: the workers may just be registering).
func (s *Scheduler) cachedFleetGPUs(ctx context.Context, now time.Time) (int, error) {
	c := &s.teams
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fleet > 0 && now.Sub(c.fleetAt) < fleetRefresh {
		return c.fleet, nil
	}
	n, err := store.FleetGPUs(ctx, s.Store)
	if err != nil {
		return 0, err
	}
	c.fleet, c.fleetAt = n, now
	return n, nil
}

// pastUsage returns the teams' usage by day over the days that still weigh
// (ten half-lives, at most 400 days), read at most every usageRefresh.
func (s *Scheduler) pastUsage(ctx context.Context, p fairshare.Policy, now time.Time) []store.TeamDay {
	c := &s.teams
	c.mu.Lock()
	defer c.mu.Unlock()
	if now.Sub(c.readAt) < usageRefresh {
		return c.days
	}
	from := now.Add(-min(10*p.HalfLife, 400*24*time.Hour)).Format(store.DayFormat)
	if days, err := s.Store.TeamUsage(ctx, from); err == nil {
		c.readAt, c.days = now, days
	}
	return c.days
}

// preemptionDue reports whether a pass may weigh preemption now: at most
// once a second (or scheduler interval, if shorter), so that a busy queue
// does not read the running jobs' workers on every pass. A pass turned
// away wakes the scheduler when the second is up: nothing else may come to
// wake it until the next tick.
func (s *Scheduler) preemptionDue(now time.Time) bool {
	c := &s.teams
	c.mu.Lock()
	defer c.mu.Unlock()
	every := min(s.options().Interval, time.Second)
	if wait := every - now.Sub(c.lastPreempt); wait > 0 {
		if !c.wakeArmed {
			c.wakeArmed = true
			time.AfterFunc(wait, func() {
				c.mu.Lock()
				c.wakeArmed = false
				c.mu.Unlock()
				s.Wake()
			})
		}
		return false
	}
	c.lastPreempt = now
	return true
}

// preemptFor weighs the waiting jobs, in queue order, for preemption: for
// each, the fewest and most recently started running jobs it may stop on
// one worker (package fairshare), each worker for one waiting job. The
// worker held for a job ahead in the queue is left to it; the first worker
// freed for a job is held for that job, so that what is freed goes to it.
func (s *Scheduler) preemptFor(ctx context.Context, teams *teamsNow, waiting []store.QueuedJob) {
	byWorker := map[string][]store.ActiveAttempt{}
	for _, a := range teams.active {
		byWorker[a.WorkerID] = append(byWorker[a.WorkerID], a)
	}
	ids := make([]string, 0, len(byWorker))
	for id := range byWorker {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	workers, err := s.Store.GetWorkers(ctx, ids)
	if err != nil || len(workers) == 0 {
		return
	}
	slices.SortFunc(workers, func(a, b store.Worker) int { return strings.Compare(a.ID, b.ID) })
	res := s.Reservation()
	taken, ahead := map[string]bool{}, map[string]bool{}
	for _, j := range waiting {
		heldForAhead := res.JobID != "" && res.JobID != j.ID && ahead[res.JobID]
		ahead[j.ID] = true
		var hosts []fairshare.Host
		for _, w := range workers {
			if taken[w.ID] || !lifecycle.Working(w.Status) || !placement.Matches(j, w) ||
				(heldForAhead && res.WorkerID == w.ID) {
				continue
			}
			capa := w.Capacity()
			hosts = append(hosts, fairshare.Host{WorkerID: w.ID, GPUs: max(w.GPUInfo.Count-len(w.GPUConditions), 0),
				FreeGPUs: capa.FreeUsableGPUs(), SharesGPUs: capa.SharesGPUs(), Running: byWorker[w.ID]})
		}
		c, ok := teams.st.Victims(j, hosts)
		if !ok {
			continue
		}
		taken[c.WorkerID] = true
		if res.JobID == "" || !ahead[res.JobID] || res.JobID == j.ID {
			res = placement.Reservation{JobID: j.ID, WorkerID: c.WorkerID}
			s.setReservation(res)
		}
		h := hosts[slices.IndexFunc(hosts, func(h fairshare.Host) bool { return h.WorkerID == c.WorkerID })]
		teams.st.Took(j.Team, fairshare.JobGPUs(j, h.GPUs))
		for _, v := range c.Victims {
			teams.st.Leaving(v)
			s.Moves.Preempt(ctx, v, j.ID, c.Why)
		}
	}
}

// WriteTeamMetrics writes each team's GPU-seconds (ended attempts), the GPUs
// and queue it holds now, and its fair-share factor.
func (s *Scheduler) WriteTeamMetrics(ctx context.Context, w io.Writer) {
	now := time.Now().UTC()
	days, err := s.Store.TeamUsage(ctx, "")
	if err != nil {
		return
	}
	active, err := s.Store.ListActiveAttempts(ctx)
	if err != nil {
		return
	}
	fleet, err := store.FleetGPUs(ctx, s.Store)
	if err != nil {
		return
	}
	p := s.teamPolicy(ctx)
	st := fairshare.NewStanding(p, days, active, fleet, now)
	total := map[string]float64{}
	for _, d := range days {
		total[d.Team] += d.GPUSeconds
	}
	teams := st.Teams()
	queued, err := s.queuedByTeam(ctx, p, teams)
	if err != nil {
		return
	}
	family := func(name, typ, help string, value func(i int, t fairshare.TeamState) string) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
		for i, t := range teams {
			fmt.Fprintf(w, "%s{team=%q} %s\n", name, t.Name, value(i, t))
		}
	}
	family("simpletuner_team_gpu_seconds_total", "counter", "GPU-seconds of the team's ended attempts.",
		func(_ int, t fairshare.TeamState) string { return fmt.Sprint(total[t.Name]) })
	family("simpletuner_team_running_gpus", "gauge", "GPUs the team's attempts hold now.",
		func(_ int, t fairshare.TeamState) string { return fmt.Sprint(t.RunningGPUs) })
	family("simpletuner_team_queued_jobs", "gauge", "The team's jobs waiting in the queue.",
		func(i int, _ fairshare.TeamState) string { return fmt.Sprint(queued[i]) })
	family("simpletuner_team_share", "gauge", "The team's part of the fleet: its share over the sum of the shares.",
		func(_ int, t fairshare.TeamState) string { return fmt.Sprint(t.ShareFraction) })
	family("simpletuner_team_fair_share_factor", "gauge", "2^(-usage fraction / share fraction): 1 for no use, 0.5 for exactly its share.",
		func(_ int, t fairshare.TeamState) string { return fmt.Sprint(t.Factor) })
}

// queuedByTeam counts each team's queued jobs. With one team and no queue
// limit there is no index of the teams' queues, and every queued job is
// the default team's: the per-status counts say how many, where counting
// would read the whole queue on every scrape.
func (s *Scheduler) queuedByTeam(ctx context.Context, p fairshare.Policy, teams []fairshare.TeamState) ([]int, error) {
	out := make([]int, len(teams))
	if !p.ReadsTeamQueues() {
		counts, err := s.Store.CountJobs(ctx)
		if err != nil {
			return nil, err
		}
		for i, t := range teams {
			if t.Name == config.DefaultTeam {
				out[i] = counts[protocol.JobQueued]
			}
		}
		return out, nil
	}
	for i, t := range teams {
		n, err := s.Store.CountQueuedOfTeam(ctx, t.Name)
		if err != nil {
			return nil, err
		}
		out[i] = n
	}
	return out, nil
}
