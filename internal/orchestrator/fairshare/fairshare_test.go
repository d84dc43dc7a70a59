package fairshare

import (
	"math"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

var now = time.Date(2030, 1, 10, 12, 0, 0, 0, time.UTC)

// policy is two teams of equal share (the default team's share next to
// nothing, so that the factors are round), preemption on after a minute of
// running.
func policy(mod ...func(*config.Orchestrator)) Policy {
	cfg := config.DefaultOrchestrator()
	cfg.Teams = []config.TeamConfig{{Name: "flood", Share: 1}, {Name: "late", Share: 1}, {Name: "default", Share: 1e-9}}
	cfg.Jobs.MinRuntime.Duration = time.Minute
	for _, m := range mod {
		m(cfg)
	}
	return PolicyFrom(cfg)
}

func running(id, team, worker string, gpus int, startedAgo time.Duration) store.ActiveAttempt {
	started := now.Add(-startedAgo)
	return store.ActiveAttempt{JobID: id, Team: team, WorkerID: worker, Status: protocol.JobRunning, GPUs: gpus, StartedAt: &started}
}

func near(t *testing.T, got, want float64, what string) {
	t.Helper()
	if math.Abs(got-want) > 1e-6 {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}

func TestDecayHalvesAtTheHalfLife(t *testing.T) {
	near(t, Decay(100, 7*24*time.Hour, 7*24*time.Hour), 50, "one half-life")
	near(t, Decay(100, 14*24*time.Hour, 7*24*time.Hour), 25, "two")
	near(t, Decay(100, 0, time.Hour), 100, "now")
	// A day's use is as old as its average moment.
	p := policy(func(c *config.Orchestrator) { c.Jobs.UsageHalfLife.Duration = time.Hour })
	st := NewStanding(p, []store.TeamDay{{Team: "flood", Day: "2030-01-10", GPUSeconds: 100, UsedAt: now.Add(-time.Hour)}}, nil, 16, now)
	near(t, st.Team("flood").DecayedGPUSeconds, 50, "used an hour ago, half-life an hour")
}

func TestFactorIsShareAgainstUsage(t *testing.T) {
	st := NewStanding(policy(), nil, nil, 16, now)
	near(t, st.Team("flood").Factor, 1, "no usage at all")
	days := []store.TeamDay{{Team: "flood", Day: "2030-01-10", GPUSeconds: 3600, UsedAt: now}}
	st = NewStanding(policy(), days, nil, 16, now)
	near(t, st.Team("late").Factor, 1, "a team that used nothing")
	near(t, st.Team("flood").Factor, 0.25, "a team that used everything with half the share: 2^-2")
	days = append(days, store.TeamDay{Team: "late", Day: "2030-01-10", GPUSeconds: 3600, UsedAt: now})
	st = NewStanding(policy(), days, nil, 16, now)
	near(t, st.Team("late").Factor, 0.5, "exactly its share")
	// Running attempts count as used as they run.
	st = NewStanding(policy(), nil, []store.ActiveAttempt{running("j1", "flood", "w1", 8, time.Hour)}, 16, now)
	if st.Team("flood").Factor >= st.Team("late").Factor || st.Team("flood").RunningGPUs != 8 {
		t.Fatalf("running usage: %+v", st.Team("flood"))
	}
}

func TestOrderIsPriorityThenFactorThenSubmission(t *testing.T) {
	days := []store.TeamDay{{Team: "flood", Day: "2030-01-10", GPUSeconds: 3600, UsedAt: now}}
	st := NewStanding(policy(), days, nil, 16, now)
	flood := store.QueuedJob{ID: "a", Team: "flood", Priority: 10, Seq: 1}
	late := store.QueuedJob{ID: "b", Team: "late", Priority: 10, Seq: 2}
	if !st.Before(late, flood) {
		t.Fatal("within a priority, the team with the higher factor goes first")
	}
	flood.Priority = 11
	if !st.Before(flood, late) {
		t.Fatal("priority comes before fair share")
	}
	later := store.QueuedJob{ID: "c", Team: "late", Priority: 10, Seq: 3}
	if !st.Before(late, later) || st.Before(later, late) {
		t.Fatal("within a team, submission order")
	}
}

func TestLimits(t *testing.T) {
	p := policy(func(c *config.Orchestrator) { c.Teams[0].MaxGPUs = 4 })
	st := NewStanding(p, nil, []store.ActiveAttempt{running("j1", "flood", "w1", 2, time.Hour)}, 16, now)
	if st.OverLimit(store.QueuedJob{Team: "flood"}, 2) || !st.OverLimit(store.QueuedJob{Team: "flood"}, 3) {
		t.Fatal("max_gpus 4 with 2 held: 2 more fit, 3 do not")
	}
	st.Took("flood", 2)
	if !st.OverLimit(store.QueuedJob{Team: "flood"}, 1) {
		t.Fatal("what the pass placed counts")
	}
	if st.OverLimit(store.QueuedJob{Team: "late"}, 16) {
		t.Fatal("a team without max_gpus has no limit")
	}
}

// fleet: two workers of 8 GPUs that run several jobs each, all held by
// "flood": w1 runs four 2-GPU jobs started 4, 3, 2 and 1 hours ago, w2 one
// 8-GPU job started 5 hours ago.
func fleet() ([]store.ActiveAttempt, []Host) {
	w1 := []store.ActiveAttempt{
		running("old", "flood", "w1", 2, 4*time.Hour), running("mid", "flood", "w1", 2, 3*time.Hour),
		running("new", "flood", "w1", 2, 2*time.Hour), running("newest", "flood", "w1", 2, time.Hour),
	}
	w2 := []store.ActiveAttempt{running("big", "flood", "w2", 8, 5*time.Hour)}
	hosts := []Host{{WorkerID: "w1", GPUs: 8, SharesGPUs: true, Running: w1}, {WorkerID: "w2", GPUs: 8, SharesGPUs: true, Running: w2}}
	return append(append([]store.ActiveAttempt{}, w1...), w2...), hosts
}

func victimIDs(c Choice) []string {
	var out []string
	for _, v := range c.Victims {
		out = append(out, v.JobID)
	}
	return out
}

func TestVictimsAreTheFewestMostRecentlyStarted(t *testing.T) {
	active, hosts := fleet()
	usage := []store.TeamDay{{Team: "flood", Day: "2030-01-10", GPUSeconds: 36000, UsedAt: now}}
	st := NewStanding(policy(), usage, active, 16, now)
	// On w1, 4 GPUs are two of its 2-GPU jobs: the two started last.
	c, ok := st.Victims(store.QueuedJob{ID: "j_late", Team: "late", GPUCount: 4}, hosts[:1])
	if !ok || c.WorkerID != "w1" || len(c.Victims) != 2 || victimIDs(c)[0] != "newest" || victimIDs(c)[1] != "new" {
		t.Fatalf("for 4 GPUs on w1: %+v %v; want the two newest 2-GPU jobs", victimIDs(c), ok)
	}
	if c.Why != "team late under its share" {
		t.Fatalf("why = %q", c.Why)
	}
	// With w2 too, one victim there beats two on w1.
	c, ok = st.Victims(store.QueuedJob{ID: "j_late", Team: "late", GPUCount: 4}, hosts)
	if !ok || c.WorkerID != "w2" || len(c.Victims) != 1 {
		t.Fatalf("for 4 GPUs: %s %v %v; want the one job on w2", c.WorkerID, victimIDs(c), ok)
	}
	// Between two workers needing as many victims, the one whose victims
	// started last.
	hosts[1].Running = []store.ActiveAttempt{running("a", "flood", "w2", 2, 30*time.Minute),
		running("b", "flood", "w2", 2, 20*time.Minute), running("c", "flood", "w2", 4, 10*time.Hour)}
	active = append(active[:4], hosts[1].Running...)
	st = NewStanding(policy(), usage, active, 16, now)
	c, ok = st.Victims(store.QueuedJob{ID: "j_late", Team: "late", GPUCount: 4}, hosts)
	if !ok || c.WorkerID != "w2" || len(c.Victims) != 2 || victimIDs(c)[0] != "b" {
		t.Fatalf("tie: %s %v %v; want jobs b and a on w2", c.WorkerID, victimIDs(c), ok)
	}
	// A job that takes a worker whole needs every job there to go.
	c, ok = st.Victims(store.QueuedJob{ID: "j_late", Team: "late", WholeWorker: true}, hosts)
	if !ok || c.WorkerID != "w2" {
		t.Fatalf("whole worker: %s %v", c.WorkerID, ok)
	}
}

func TestNoPreemptionAgainstTheRules(t *testing.T) {
	active, hosts := fleet()
	heavy := []store.TeamDay{{Team: "flood", Day: "2030-01-10", GPUSeconds: 36000, UsedAt: now}}
	cases := []struct {
		name string
		job  store.QueuedJob
		p    Policy
		days []store.TeamDay
	}{
		{"same team", store.QueuedJob{Team: "flood", GPUCount: 2, Priority: 50}, policy(), heavy},
		{"the waiting team used more", store.QueuedJob{Team: "late", GPUCount: 2},
			policy(), []store.TeamDay{{Team: "late", Day: "2030-01-10", GPUSeconds: 1e9, UsedAt: now}}},
		{"lower priority than the victims", store.QueuedJob{Team: "late", GPUCount: 2, Priority: -1}, policy(), heavy},
		{"the waiting team's factor not twice the victim's", store.QueuedJob{Team: "late", GPUCount: 2},
			policy(), append([]store.TeamDay{{Team: "late", Day: "2030-01-10", GPUSeconds: 240000, UsedAt: now}}, heavy...)},
		{"victims ran less than min_runtime", store.QueuedJob{Team: "late", GPUCount: 2},
			policy(func(c *config.Orchestrator) { c.Jobs.MinRuntime.Duration = 10 * time.Hour }), heavy},
		{"the waiting team has almost no share", store.QueuedJob{Team: "late", GPUCount: 2},
			policy(func(c *config.Orchestrator) { c.Teams[1].Share = 1e-6 }), heavy},
		{"the job would take its team beyond max_gpus", store.QueuedJob{Team: "late", GPUCount: 2, Priority: 5},
			policy(func(c *config.Orchestrator) { c.Teams[1].MaxGPUs = 1 }), heavy},
	}
	for _, tc := range cases {
		st := NewStanding(tc.p, tc.days, active, 16, now)
		if c, ok := st.Victims(tc.job, hosts); ok {
			t.Errorf("%s: preempted %v on %s", tc.name, victimIDs(c), c.WorkerID)
		}
	}
}

func TestPreemptionStopsAtTheVictimsShare(t *testing.T) {
	active, hosts := fleet()
	usage := []store.TeamDay{{Team: "flood", Day: "2030-01-10", GPUSeconds: 36000, UsedAt: now}}
	st := NewStanding(policy(), usage, active, 16, now)
	// flood holds 16 and keeps 8: 4 GPUs go for the first job, 4 more for
	// the second, and then no more.
	for i, want := range []bool{true, true, false} {
		c, ok := st.Victims(store.QueuedJob{Team: "late", GPUCount: 4}, hosts[:1])
		if ok != want {
			t.Fatalf("round %d: ok = %v, want %v (%v)", i, ok, want, victimIDs(c))
		}
		for _, v := range c.Victims {
			st.Leaving(v)
			hosts[0].Running = removeJob(hosts[0].Running, v.JobID)
		}
		st.Took("late", 4)
	}
}

func removeJob(as []store.ActiveAttempt, id string) []store.ActiveAttempt {
	var out []store.ActiveAttempt
	for _, a := range as {
		if a.JobID != id {
			out = append(out, a)
		}
	}
	return out
}

func TestBorrowedGPUsAreGivenBack(t *testing.T) {
	// flood may hold 4 GPUs but borrowed 16; late used more than flood, so
	// only the borrowing makes flood's jobs fair game — and only down to 4.
	active, hosts := fleet()
	p := policy(func(c *config.Orchestrator) { c.Teams[0].MaxGPUs, c.Teams[0].Borrow = 4, true })
	st := NewStanding(p, nil, active, 16, now)
	c, ok := st.Victims(store.QueuedJob{Team: "late", GPUCount: 8}, hosts)
	if !ok || len(c.Victims) != 1 || c.Victims[0].JobID != "big" {
		t.Fatalf("borrowed GPUs: %v %v", victimIDs(c), ok)
	}
}

// A team with no work leaves its part of the fleet to the teams with work:
// with an idle third team of equal share, the late team is still entitled
// to half the fleet, not a third.
func TestIdleTeamsLeaveTheirPart(t *testing.T) {
	active, hosts := fleet()
	p := policy(func(c *config.Orchestrator) { c.Teams[2].Share = 1 })
	st := NewStanding(p, nil, active, 16, now)
	st.Waiting([]string{"late"})
	if e := st.Team("late"); e.WorkFraction != 0.5 || e.ShareFraction > 0.34 {
		t.Fatalf("late: %+v", e)
	}
	if e := st.Team("default"); e.WorkFraction != 0 {
		t.Fatalf("the idle team: %+v", e)
	}
	// flood holds 16 and keeps 8: the late team may take 8.
	c, ok := st.Victims(store.QueuedJob{Team: "late", GPUCount: 8}, hosts)
	if !ok || c.WorkerID != "w2" {
		t.Fatalf("%v %v", victimIDs(c), ok)
	}
}

// The default team, when [[teams]] does not name it, has no share of its
// own: two configured teams of share 1 are entitled to half the fleet each,
// not a third. Alone it has the whole fleet, and a default team with work
// but no share still runs jobs on what nobody else wants.
func TestTheUnnamedDefaultTeamHasNoShare(t *testing.T) {
	cfg := config.DefaultOrchestrator()
	cfg.Teams = []config.TeamConfig{{Name: "vision", Share: 1}, {Name: "nlp", Share: 1}}
	p := PolicyFrom(cfg)
	st := NewStanding(p, nil, nil, 16, now)
	for _, name := range []string{"vision", "nlp"} {
		near(t, st.Team(name).ShareFraction, 0.5, name+"'s share fraction")
	}
	near(t, st.Team("default").ShareFraction, 0, "the default team's share fraction")

	// The default team runs 8 GPUs while both teams wait: they split the
	// fleet, and the default team keeps nothing they could want.
	active := []store.ActiveAttempt{running("d1", "default", "w1", 8, time.Hour)}
	st = NewStanding(p, nil, active, 16, now)
	st.Waiting([]string{"vision", "nlp"})
	near(t, st.Team("vision").WorkFraction, 0.5, "vision's part of the fleet")
	near(t, st.Team("default").WorkFraction, 0, "the default team's part")
	if f := st.Team("default").Factor; math.IsNaN(f) || f >= st.Team("vision").Factor {
		t.Fatalf("the default team's factor %v; want below vision's %v", f, st.Team("vision").Factor)
	}
	if st.Before(store.QueuedJob{Team: "default", Seq: 1}, store.QueuedJob{Team: "nlp", Seq: 2}) {
		t.Fatal("within a priority, a job of the default team went before a team's")
	}
	if !st.MayLose("default", 8) {
		t.Fatal("the default team keeps GPUs another team waits for")
	}

	// With nobody else waiting, the default team has the fleet.
	st = NewStanding(p, nil, active, 16, now)
	near(t, st.Team("default").WorkFraction, 1, "the default team alone with work")
	if f := st.Team("default").Factor; math.IsNaN(f) {
		t.Fatal("the default team's factor is NaN")
	}

	// Without [[teams]] the default team is the whole fleet.
	alone := NewStanding(PolicyFrom(config.DefaultOrchestrator()), nil, active, 16, now)
	near(t, alone.Team("default").ShareFraction, 1, "the default team without [[teams]]")
	// Named in [[teams]], it has the share given there.
	cfg.Teams = append(cfg.Teams, config.TeamConfig{Name: "default", Share: 2})
	named := NewStanding(PolicyFrom(cfg), nil, nil, 16, now)
	near(t, named.Team("default").ShareFraction, 0.5, "the default team of share 2 next to two of share 1")
}

// A job of a higher priority preempts only for a team under its share: a
// team that already holds more than its share does not take another
// team's GPUs by raising its priority.
func TestPriorityPreemptsOnlyForATeamUnderItsShare(t *testing.T) {
	p := policy(func(c *config.Orchestrator) {
		c.Teams = append(c.Teams, config.TeamConfig{Name: "third", Share: 1})
	})
	// Six GPUs, three teams with work: two GPUs each. flood holds 3 and
	// late holds 3; third waits.
	active := []store.ActiveAttempt{
		running("f1", "flood", "w1", 1, time.Hour), running("f2", "flood", "w1", 1, time.Hour), running("f3", "flood", "w1", 1, time.Hour),
		running("l1", "late", "w2", 1, time.Hour), running("l2", "late", "w2", 1, time.Hour), running("l3", "late", "w2", 1, time.Hour),
	}
	hosts := []Host{{WorkerID: "w2", GPUs: 3, SharesGPUs: true, Running: active[3:]}}
	st := NewStanding(p, nil, active, 6, now)
	st.Waiting([]string{"flood", "third"})
	urgent := store.QueuedJob{ID: "j_urgent", Team: "flood", GPUCount: 1, Priority: 50}
	if why := st.Why(urgent, active[3]); why != "" {
		t.Fatalf("flood, over its share, may preempt late's job: %q", why)
	}
	if c, ok := st.Victims(urgent, hosts); ok {
		t.Fatalf("flood, over its share, preempted %v", victimIDs(c))
	}
	// The third team, under its share, may: by priority as by share.
	if why := st.Why(store.QueuedJob{Team: "third", GPUCount: 1, Priority: 50}, active[3]); why != "priority 50 over 0" {
		t.Fatalf("third's urgent job: %q", why)
	}
}
