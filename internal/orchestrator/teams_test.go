package orchestrator_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/fairshare"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/orchtest"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
)

// withTeams configures the teams flood and late with equal shares (the
// default team with almost none), preemption on from the first second of
// running, and mod's changes.
func withTeams(mod ...func(*config.Orchestrator)) func(*orchestrator.Options) {
	return func(o *orchestrator.Options) {
		cfg := config.DefaultOrchestrator()
		cfg.Teams = []config.TeamConfig{{Name: "flood", Share: 1}, {Name: "late", Share: 1}, {Name: "default", Share: 0.001}}
		cfg.Jobs.MinRuntime.Duration = 0
		for _, m := range mod {
			m(cfg)
		}
		o.Teams = fairshare.PolicyFrom(cfg)
	}
}

// teamToken creates an admin token of team with every scope.
func (e *env) teamToken(team string) string {
	e.t.Helper()
	r := e.Must(e.AdminDo("POST", "/api/admin/tokens", map[string]any{"name": team + "-ci", "scopes": []string{"*"}, "team": team}), 201)
	if r.JSON["team"] != team {
		e.t.Fatalf("token's team: %s", r.Body)
	}
	return r.JSON["token"].(string)
}

// submitAs submits a job as SimpleTuner's documentation shows it (no GPU
// count) with token.
func (e *env) submitAs(token string, body map[string]any) orchtest.Reply {
	e.t.Helper()
	if body == nil {
		body = map[string]any{}
	}
	body["config"] = map[string]any{"model_type": "lora"}
	return e.Do("POST", "/api/queue/submit", map[string]string{"Authorization": "Bearer " + token}, body)
}

var oneGPU = map[string]any{"name": "NVIDIA H100", "count": 1, "vram_gb": 80}

// The late team's job stops the flood team's most recently started job,
// which goes back to the queue without spending a retry, with the reason in
// its history; the late job runs on the freed worker.
func TestPreemptionForATeamUnderItsShare(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(testing.TB) store.Store) {
		e := setup(t, open(t), withTeams())
		flood, late := e.teamToken("flood"), e.teamToken("late")
		a := e.startAgent("a", nil, oneGPU)
		b := e.startAgent("b", nil, oneGPU)
		// Each worker gets a flood job; b's is acknowledged last.
		floods := e.runOnEach(flood, a, b)
		// A third flood job waits behind them.
		e.Must(e.submitAs(flood, nil), 201)
		lateJob := e.Must(e.submitAs(late, nil), 201).JSON["job_id"].(string)

		// b's job started last: it is the victim.
		ev := b.next("job_cancel", eventWait)
		if ev["job_id"] != floods[1] {
			t.Fatalf("job_cancel for %v, want the most recently started %s", ev["job_id"], floods[1])
		}
		a.noEvent("job_cancel", 300*time.Millisecond)
		e.Must(b.report(floods[1], "cancelled", nil), 200)
		if ev := b.next("job_submit", eventWait); ev["job_id"] != lateJob {
			t.Fatalf("the freed worker got %v, want the late team's %s", ev["job_id"], lateJob)
		}
		j := e.Job(floods[1])
		if j["status"] != "queued" || j["retries_used"] != float64(0) || j["team"] != "flood" {
			t.Fatalf("preempted job: %v", j)
		}
		if msg, _ := j["error_message"].(string); !strings.Contains(msg, "preempted by "+lateJob+" (team late under its share)") {
			t.Fatalf("preempted job's history: %q", msg)
		}
		attempts := j["attempts"].([]any)
		if out := attempts[0].(map[string]any)["outcome"]; out != "preempted" {
			t.Fatalf("attempt outcome %v", out)
		}
		m := e.metrics()
		if m["simpletuner_preemptions_total"] != 1 || m[`simpletuner_team_running_gpus{team="late"}`] != 1 ||
			m[`simpletuner_team_gpu_seconds_total{team="flood"}`] <= 0 || m[`simpletuner_team_fair_share_factor{team="late"}`] <= m[`simpletuner_team_fair_share_factor{team="flood"}`] {
			t.Fatalf("metrics: %v", m)
		}
		// Each team now holds its share: nothing more is preempted.
		e.Must(e.submitAs(late, nil), 201)
		a.noEvent("job_cancel", 500*time.Millisecond)

		u := e.Must(e.AdminDo("GET", "/api/admin/usage", nil), 200).JSON
		teams := map[string]map[string]any{}
		for _, t := range u["teams"].([]any) {
			tm := t.(map[string]any)
			teams[tm["team"].(string)] = tm
		}
		if teams["flood"]["running_gpus"] != float64(1) || teams["late"]["running_gpus"] != float64(1) ||
			teams["flood"]["queued_jobs"] != float64(2) || u["fleet_gpus"] != float64(2) {
			t.Fatalf("usage: %v", u)
		}
	})
}

// Teams' limits and bad input: an unknown team on a token, a job larger
// than its team's max_gpus, a queue past max_queued.
func TestTeamLimits(t *testing.T) {
	t.Parallel()
	e := setup(t, backends["sqlite"](t), withTeams(func(c *config.Orchestrator) {
		c.Teams[0].MaxQueued, c.Teams[0].MaxGPUs = 2, 1
	}))
	r := e.AdminDo("POST", "/api/admin/tokens", map[string]any{"name": "x", "scopes": []string{"*"}, "team": "nope"})
	if r.Status != http.StatusUnprocessableEntity || !strings.Contains(r.JSON["detail"].(string), `unknown team "nope"`) {
		t.Fatalf("unknown team: %d %s", r.Status, r.Body)
	}
	flood := e.teamToken("flood")
	r = e.submitAs(flood, map[string]any{"gpu_count": 2})
	if r.Status != http.StatusUnprocessableEntity || !strings.Contains(r.JSON["detail"].(string), "at most 1") {
		t.Fatalf("over max_gpus: %d %s", r.Status, r.Body)
	}
	for range 2 {
		e.Must(e.submitAs(flood, map[string]any{"gpu_count": 1}), 201)
	}
	r = e.submitAs(flood, map[string]any{"gpu_count": 1})
	if r.Status != http.StatusTooManyRequests || !strings.Contains(r.JSON["detail"].(string), `team "flood" already has 2 jobs queued or waiting, its max_queued`) {
		t.Fatalf("over max_queued: %d %s", r.Status, r.Body)
	}
	// With one GPU held, the next flood job waits with its team's reason.
	a := e.startAgent("a", nil, oneGPU)
	ev := a.next("job_submit", eventWait)
	e.Must(a.report(ev["job_id"].(string), "running", nil), 200)
	jobs := e.Must(e.Queue("status=queued&waiting=1"), 200).JSON["entries"].([]any)
	if len(jobs) != 1 || jobs[0].(map[string]any)["waiting_reason"] != "team_gpu_limit" {
		t.Fatalf("waiting: %v", jobs)
	}
}

// runOnEach submits a job as token for each agent, each of which takes one
// (whole-worker jobs), and acknowledges them in the agents' order.
func (e *env) runOnEach(token string, agents ...*agent) []string {
	e.t.Helper()
	for range agents {
		e.Must(e.submitAs(token, nil), 201)
	}
	var ids []string
	for _, w := range agents {
		id := w.next("job_submit", eventWait)["job_id"].(string)
		e.Must(w.report(id, "running", nil), 200)
		ids = append(ids, id)
	}
	return ids
}

// A preempted job whose worker dies while it stops is requeued once.
func TestPreemptedJobsWorkerDiesDuringGrace(t *testing.T) {
	t.Parallel()
	e := setup(t, backends["sqlite"](t), withTeams())
	flood, late := e.teamToken("flood"), e.teamToken("late")
	a := e.startAgent("a", nil, oneGPU)
	b := e.startAgent("b", nil, oneGPU)
	id := e.runOnEach(flood, a, b)[1]
	e.Must(e.submitAs(late, nil), 201)
	b.next("job_cancel", eventWait)
	b.silence()
	b.cancel()
	testutil.Eventually(t, eventWait, "requeued", func() bool { return e.Job(id)["status"] == "queued" })
	j := e.Job(id)
	attempts := j["attempts"].([]any)
	if len(attempts) != 1 || attempts[0].(map[string]any)["outcome"] != "preempted" || j["retries_used"] != float64(0) {
		t.Fatalf("after the worker died: %v", j)
	}
}

// A user's cancel during a preemption wins: the job ends cancelled, not
// requeued.
func TestCancelDuringPreemption(t *testing.T) {
	t.Parallel()
	e := setup(t, backends["sqlite"](t), withTeams())
	flood, late := e.teamToken("flood"), e.teamToken("late")
	a := e.startAgent("a", nil, oneGPU)
	b := e.startAgent("b", nil, oneGPU)
	id := e.runOnEach(flood, a, b)[1]
	e.Must(e.submitAs(late, nil), 201)
	b.next("job_cancel", eventWait)
	if r := e.Must(e.Cancel(id), 200); r.JSON["status"] != "canceling" {
		t.Fatalf("cancel during preemption: %s", r.Body)
	}
	e.Must(b.report(id, "cancelled", nil), 200)
	if j := e.Job(id); j["status"] != "cancelled" || j["attempts"].([]any)[0].(map[string]any)["outcome"] != "cancelled" {
		t.Fatalf("after the worker confirmed: %v", j)
	}
}

// [jobs] preemption = "off": fair share orders the queue, but no running
// job is stopped.
func TestPreemptionOff(t *testing.T) {
	t.Parallel()
	e := setup(t, backends["sqlite"](t), withTeams(func(c *config.Orchestrator) { c.Jobs.Preemption = "off" }))
	flood, late := e.teamToken("flood"), e.teamToken("late")
	a := e.startAgent("a", nil, oneGPU)
	b := e.startAgent("b", nil, oneGPU)
	first := e.runOnEach(flood, a, b)[0]
	e.Must(e.submitAs(flood, nil), 201)
	lateJob := e.Must(e.submitAs(late, nil), 201).JSON["job_id"].(string)
	b.noEvent("job_cancel", time.Second)
	// The first GPU freed goes to the late team, ahead of flood's older job.
	e.Must(a.report(first, "completed", nil), 200)
	if ev := a.next("job_submit", eventWait); ev["job_id"] != lateJob {
		t.Fatalf("freed worker got %v, want the late team's %s", ev["job_id"], lateJob)
	}
}

// The index of the teams' queues costs every job's writes: it is made once
// several teams are configured, and never for one.
func TestTeamQueueIndexOnlyWithTeams(t *testing.T) {
	t.Parallel()
	const made = "the index of the teams' queues is in place"
	one := setup(t, backends["sqlite"](t))
	a := one.startAgent("a", nil, oneGPU)
	one.Submit(map[string]any{})
	a.next("job_submit", eventWait)
	if strings.Contains(one.logs.String(), made) {
		t.Fatal("one team made the team queue index")
	}
	// Its queue is counted for /metrics all the same (from the per-status
	// counts).
	one.Submit(map[string]any{})
	if m := one.metrics(); m[`simpletuner_team_queued_jobs{team="default"}`] != 1 {
		t.Fatalf("the default team's queued jobs: %v", m[`simpletuner_team_queued_jobs{team="default"}`])
	}
	two := setup(t, backends["sqlite"](t), withTeams())
	b := two.startAgent("b", nil, oneGPU)
	two.Must(two.submitAs(two.teamToken("late"), nil), 201)
	b.next("job_submit", eventWait)
	if !strings.Contains(two.logs.String(), made) {
		t.Fatal("several teams and no team queue index")
	}
}

// Next to configured teams, the default team (not named in [[teams]]) has
// no share: its jobs run on GPUs no team wants, and a team's waiting job
// takes them back.
func TestTheDefaultTeamRunsOnIdleGPUsOnly(t *testing.T) {
	t.Parallel()
	e := setup(t, backends["sqlite"](t), func(o *orchestrator.Options) {
		cfg := config.DefaultOrchestrator()
		cfg.Teams = []config.TeamConfig{{Name: "flood", Share: 1}, {Name: "late", Share: 1}}
		cfg.Jobs.MinRuntime.Duration = 0
		o.Teams = fairshare.PolicyFrom(cfg)
	})
	a := e.startAgent("a", nil, oneGPU)
	b := e.startAgent("b", nil, oneGPU)
	// The admin token is in the default team: with nobody else waiting its
	// jobs take both workers.
	defaults := e.runOnEach(e.Admin, a, b)
	late := e.Must(e.submitAs(e.teamToken("late"), nil), 201).JSON["job_id"].(string)
	ev := b.next("job_cancel", eventWait)
	if ev["job_id"] != defaults[1] {
		t.Fatalf("job_cancel for %v, want the default team's most recent job %s", ev["job_id"], defaults[1])
	}
	e.Must(b.report(defaults[1], "cancelled", nil), 200)
	if ev := b.next("job_submit", eventWait); ev["job_id"] != late {
		t.Fatalf("the freed worker got %v, want the late team's %s", ev["job_id"], late)
	}
	u := e.Must(e.AdminDo("GET", "/api/admin/usage", nil), 200).JSON
	for _, x := range u["teams"].([]any) {
		tm := x.(map[string]any)
		want := map[string]float64{"default": 0, "flood": 0.5, "late": 0.5}[tm["team"].(string)]
		if tm["share_fraction"] != want {
			t.Fatalf("team %v: share_fraction %v, want %v (%v)", tm["team"], tm["share_fraction"], want, u)
		}
	}
}

// submitterToken creates a token that may submit and view, in team, with
// the fields of extra (max_priority).
func (e *env) submitterToken(team string, extra map[string]any) string {
	e.t.Helper()
	body := map[string]any{"name": team + "-user", "scopes": []string{"queue.submit", "queue.view"}, "team": team}
	for k, v := range extra {
		body[k] = v
	}
	return e.Must(e.AdminDo("POST", "/api/admin/tokens", body), 201).JSON["token"].(string)
}

// A priority above what an admin granted is refused, naming the limit and
// where it comes from, and nothing is queued: a team's max_priority (the
// default priority unless [[teams]] sets it), a token's own grant, and no
// limit for a token with every scope.
func TestPriorityAboveTheGrantIsRefused(t *testing.T) {
	t.Parallel()
	thirty := 30
	e := setup(t, backends["sqlite"](t), withTeams(func(c *config.Orchestrator) { c.Teams[1].MaxPriority = &thirty }))
	flood := e.submitterToken("flood", nil)
	refused := func(token string, priority int, want string) {
		t.Helper()
		r := e.submitAs(token, map[string]any{"priority": priority})
		if r.Status != http.StatusUnprocessableEntity || !strings.Contains(r.JSON["detail"].(string), want) {
			t.Fatalf("priority %d: %d %s; want 422 with %q", priority, r.Status, r.Body, want)
		}
	}
	refused(flood, 11, `field "priority": 11 is above 10, the highest priority this token may give a job `+
		`(the max_priority of team "flood" in [[teams]] of orchestratord.toml)`)
	if n := e.Must(e.AdminDo("GET", "/api/queue/stats", nil), 200).JSON["queue_depth"]; n != float64(0) {
		t.Fatalf("a refused submit queued something: queue depth %v", n)
	}
	// Within the limit, and without a priority: the default.
	if id := e.Must(e.submitAs(flood, map[string]any{"priority": 10}), 201).JSON["job_id"].(string); e.Job(id)["priority"] != float64(10) {
		t.Fatal("priority 10 not kept")
	}
	if id := e.Must(e.submitAs(flood, nil), 201).JSON["job_id"].(string); e.Job(id)["priority"] != float64(10) {
		t.Fatal("the default priority")
	}
	// The late team has max_priority 30.
	late := e.submitterToken("late", nil)
	e.Must(e.submitAs(late, map[string]any{"priority": 30}), 201)
	refused(late, 31, `31 is above 30`)
	// A token's own grant comes before its team's, both ways.
	release := e.submitterToken("flood", map[string]any{"max_priority": 40})
	e.Must(e.submitAs(release, map[string]any{"priority": 40}), 201)
	refused(release, 41, `41 is above 40, the highest priority this token may give a job (this token's max_priority`)
	low := e.submitterToken("late", map[string]any{"max_priority": 5})
	refused(low, 6, `6 is above 5`)
	if id := e.Must(e.submitAs(low, nil), 201).JSON["job_id"].(string); e.Job(id)["priority"] != float64(5) {
		t.Fatal("without a priority, a token granted less than the default gets its grant")
	}
	me := e.Do("GET", "/api/auth/whoami", map[string]string{"Authorization": "Bearer " + release}, nil)
	if me.JSON["max_priority"] != float64(40) {
		t.Fatalf("whoami: %s", me.Body)
	}
	// A token with every scope may give any priority, and takes no grant.
	e.Must(e.submitAs(e.teamToken("flood"), map[string]any{"priority": 50}), 201)
	r := e.AdminDo("POST", "/api/admin/tokens", map[string]any{"name": "x", "scopes": []string{"*"}, "max_priority": 20})
	if r.Status != http.StatusUnprocessableEntity || !strings.Contains(r.JSON["detail"].(string), `field "max_priority"`) {
		t.Fatalf("a grant on a token with every scope: %d %s", r.Status, r.Body)
	}
	r = e.AdminDo("POST", "/api/admin/tokens", map[string]any{"name": "x", "scopes": []string{"queue.submit"}, "max_priority": 51})
	if r.Status != http.StatusUnprocessableEntity || !strings.Contains(r.JSON["detail"].(string), `field "max_priority" must be from 0 to 50`) {
		t.Fatalf("a grant past the priorities: %d %s", r.Status, r.Body)
	}
	// The token list shows the grants.
	var grants []any
	for _, x := range e.Must(e.AdminDo("GET", "/api/admin/tokens", nil), 200).JSON["tokens"].([]any) {
		grants = append(grants, x.(map[string]any)["max_priority"])
	}
	if fmt.Sprint(grants) != "[<nil> <nil> <nil> 40 5 <nil>]" {
		t.Fatalf("grants in the token list: %v", grants)
	}
}

// A team over its share gets no GPUs back by priority: with three teams of
// equal share on six GPUs (two each), flood holding three and late three,
// flood's job of priority 50 (within its grant) waits rather than stop one
// of late's.
func TestPriorityDoesNotPreemptForATeamOverItsShare(t *testing.T) {
	t.Parallel()
	fifty := 50
	e := setup(t, backends["sqlite"](t), withTeams(func(c *config.Orchestrator) {
		c.Teams[0].MaxPriority = &fifty
		c.Teams = append(c.Teams, config.TeamConfig{Name: "third", Share: 1})
	}))
	flood := e.submitterToken("flood", nil)
	var floods, lates []*agent
	for _, n := range []string{"f1", "f2", "f3"} {
		floods = append(floods, e.startAgent(n, nil, oneGPU))
	}
	e.runOnEach(flood, floods...)
	for _, n := range []string{"l1", "l2", "l3"} {
		lates = append(lates, e.startAgent(n, nil, oneGPU))
	}
	e.runOnEach(e.submitterToken("late", nil), lates...)
	// The third team waits too (for a worker that does not exist): each
	// team's part is two GPUs.
	e.Must(e.submitAs(e.submitterToken("third", nil), map[string]any{"worker_labels": map[string]string{"pool": "nowhere"}}), 201)
	urgent := e.Must(e.submitAs(flood, map[string]any{"priority": 50}), 201).JSON["job_id"].(string)
	for _, l := range lates {
		l.noEvent("job_cancel", 700*time.Millisecond)
	}
	if m := e.metrics(); m["simpletuner_preemptions_total"] != 0 {
		t.Fatalf("%v preemptions", m["simpletuner_preemptions_total"])
	}
	if j := e.Job(urgent); j["status"] != "queued" {
		t.Fatalf("flood's urgent job is %v", j["status"])
	}
}
