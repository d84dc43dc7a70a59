package storetest

import (
	"encoding/json"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/lifecycle"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

var teamTests = []test{
	{"TeamQueueLimit", testTeamQueueLimit},
	{"TeamQueues", testTeamQueues},
	{"TeamTokens", testTeamTokens},
	{"PreemptionRequeuesWithoutARetry", testPreemptionRequeues},
	{"TeamUsageSpreadOverDays", testTeamUsageDays},
	{"TeamUsagePrefersTheReport", testTeamUsageReported},
	{"ListJobsOfTeams", testListJobsOfTeams},
}

// A list kept to some teams holds their jobs only and counts them alone;
// the default team's include the jobs from before teams (team "").
func testListJobsOfTeams(t *testing.T, s store.Store) {
	legacy := newJob(t, s, teamJob("", 0))
	nlp := newJob(t, s, teamJob("nlp", 0))
	newJob(t, s, teamJob("vision", 0))
	cases := []struct {
		teams []string
		want  []string
	}{
		{[]string{"nlp"}, []string{nlp.ID}},
		{[]string{"default", "nlp"}, []string{legacy.ID, nlp.ID}},
		{[]string{}, nil},
	}
	for _, c := range cases {
		for _, sts := range [][]protocol.JobStatus{nil, {protocol.JobQueued, protocol.JobRunning}} {
			jobs, total, err := s.ListJobs(t.Context(), store.JobFilter{Teams: c.teams, Statuses: sts})
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, j := range jobs {
				ids = append(ids, j.ID)
			}
			if !slices.Equal(ids, c.want) || total != len(c.want) {
				t.Errorf("teams %v, statuses %v: %v (total %d), want %v", c.teams, sts, ids, total, c.want)
			}
		}
	}

	// Pages of several teams, by cursor in both orders and by offset,
	// merge the teams' jobs in submission order.
	later := newJob(t, s, teamJob("nlp", 0))
	newJob(t, s, teamJob("vision", 0))
	latest := newJob(t, s, teamJob("", 0))
	all := []string{legacy.ID, nlp.ID, later.ID, latest.ID}
	for _, newest := range []bool{false, true} {
		want := slices.Clone(all)
		if newest {
			slices.Reverse(want)
		}
		var got []string
		var after int64
		for range len(all) + 1 {
			page, _, err := s.ListJobs(t.Context(), store.JobFilter{Teams: []string{"default", "nlp"}, Limit: 1, Newest: newest, AfterSeq: after})
			if err != nil {
				t.Fatal(err)
			}
			if len(page) == 0 {
				break
			}
			got, after = append(got, page[0].ID), page[0].Seq
		}
		if !slices.Equal(got, want) {
			t.Errorf("pages newest %v: %v, want %v", newest, got, want)
		}
	}
	page, total, err := s.ListJobs(t.Context(), store.JobFilter{Teams: []string{"default", "nlp"}, Limit: 2, Offset: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(page) != 2 || page[0].ID != nlp.ID || page[1].ID != later.ID || total != 4 {
		t.Errorf("offset 1 limit 2: %v (total %d)", page, total)
	}
}

func teamJob(team string, priority int) func(*store.Job) {
	return func(j *store.Job) { j.Team, j.Priority = team, priority }
}

func testTeamQueueLimit(t *testing.T, s store.Store) {
	for range 2 {
		newJob(t, s, teamJob("nlp", 0))
	}
	newJob(t, s, teamJob("vision", 0))
	j := store.Job{ConfigName: "cfg", Target: protocol.TargetAuto, GPUCount: 1, Team: "nlp", CreatedAt: t0}
	_, err := s.InsertTeamJob(t.Context(), j, 2, rec("job.submit"))
	wantErr(t, err, store.ErrQueueFull, "a third nlp job with max_queued 2")
	if n := len(chain(t, s)); n != 0 {
		t.Fatalf("a refused submit appended %d audit records", n)
	}
	if n, err := s.CountQueuedOfTeam(t.Context(), "nlp"); err != nil || n != 2 {
		t.Fatalf("nlp queued = %d, %v; want 2", n, err)
	}
	got, err := s.InsertTeamJob(t.Context(), j, 3, rec("job.submit"))
	noErr(t, err, "within the limit")
	equal(t, got.Team, "nlp", "team")
	j.Team = "vision"
	_, err = s.InsertTeamJob(t.Context(), j, 2, nil)
	noErr(t, err, "another team's limit is its own")
}

func testTeamQueues(t *testing.T, s store.Store) {
	a1 := newJob(t, s, teamJob("nlp", 0))
	// The index is made on a table with jobs in it, and making it again is
	// a no-op.
	noErr(t, s.EnsureTeamQueueIndex(t.Context()), "EnsureTeamQueueIndex")
	noErr(t, s.EnsureTeamQueueIndex(t.Context()), "EnsureTeamQueueIndex again")
	b1 := newJob(t, s, teamJob("vision", 5))
	a2 := newJob(t, s, teamJob("nlp", 9))
	newJob(t, s) // the default team's
	ids := func(js []store.QueuedJob) []string {
		var out []string
		for _, j := range js {
			out = append(out, j.ID+"/"+j.Team)
		}
		return out
	}
	got, err := s.ListQueuedOfTeam(t.Context(), "nlp", nil, 10)
	noErr(t, err, "ListQueuedOfTeam")
	equal(t, ids(got), []string{a2.ID + "/nlp", a1.ID + "/nlp"}, "nlp's queue in claim order")
	got, err = s.ListQueuedOfTeam(t.Context(), "nlp", &got[0], 10)
	noErr(t, err, "ListQueuedOfTeam after")
	equal(t, ids(got), []string{a1.ID + "/nlp"}, "nlp's queue after its first")
	got, err = s.ListQueuedOfTeam(t.Context(), "vision", nil, 10)
	noErr(t, err, "ListQueuedOfTeam vision")
	equal(t, ids(got), []string{b1.ID + "/vision"}, "vision's queue")

	w := newWorker(t, s)
	j, _ := claim(t, s, w.ID) // a2, priority 9
	equal(t, j.ID, a2.ID, "claimed")
	teams, err := s.TeamsWithJobs(t.Context())
	noErr(t, err, "TeamsWithJobs")
	equal(t, teams, []string{"default", "nlp", "vision"}, "teams with unfinished jobs")
	active, err := s.ListActiveAttempts(t.Context())
	noErr(t, err, "ListActiveAttempts")
	equal(t, active, []store.ActiveAttempt{{JobID: a2.ID, Team: "nlp", WorkerID: w.ID, Status: protocol.JobDispatched,
		Priority: 9}}, "active attempts")
}

func testTeamTokens(t *testing.T, s store.Store) {
	tok := store.AdminToken{ID: "tok_team", Name: "nlp-ci", Scopes: []string{"queue.submit"}, Hash: randHex(), Team: "nlp", CreatedAt: t0}
	noErr(t, s.CreateAdminToken(t.Context(), tok, nil), "CreateAdminToken")
	got, err := s.GetAdminTokenByHash(t.Context(), tok.Hash)
	noErr(t, err, "GetAdminTokenByHash")
	equal(t, got.Team, "nlp", "token's team")
	noErr(t, s.CreateDashboardSession(t.Context(), store.DashboardSession{IDHash: randHex(), TokenID: tok.ID,
		CreatedAt: t0, LastSeen: t0}, nil), "CreateDashboardSession")
	list, err := s.ListAdminTokens(t.Context())
	noErr(t, err, "ListAdminTokens")
	equal(t, list[0].Team, "nlp", "listed token's team")
}

// runningOn gives a 2-GPU worker a job of team and acknowledges it at ack.
func runningOn(t *testing.T, s store.Store, team string, ack time.Time) store.Job {
	t.Helper()
	w := newWorker(t, s, func(w *store.Worker) {
		w.Protocol, w.Capabilities.MaxJobs = 2, 2
		w.GPUInfo = store.ReadGPUInfo(json.RawMessage(`{"count":2,"devices":[{"index":0},{"index":1}]}`))
	})
	j := newJob(t, s, func(j *store.Job) { j.Team, j.GPUCount = team, 2 })
	j, _, err := s.ClaimJob(t.Context(), store.ClaimRequest{WorkerID: w.ID, JobID: j.ID, GPUs: []int{0, 1},
		UploadTokenHash: "up", AckDeadline: ack.Add(time.Minute), Now: ack.Add(-time.Second)})
	noErr(t, err, "ClaimJob")
	return transition(t, s, j, store.JobTransition{Step: lifecycle.Step{To: protocol.JobRunning, By: lifecycle.Report, Ack: true}, Now: ack})
}

func testPreemptionRequeues(t *testing.T, s store.Store) {
	j := runningOn(t, s, "nlp", at(0))
	why := "j_winner (team vision under its share)"
	j = transition(t, s, j, store.JobTransition{Step: lifecycle.Step{To: protocol.JobCanceling, By: lifecycle.Preempt},
		PreemptedBy: &why, Now: at(time.Hour)})
	equal(t, j.PreemptedBy, why, "preempted_by while stopping")
	active, err := s.ListActiveAttempts(t.Context())
	noErr(t, err, "ListActiveAttempts")
	if len(active) != 1 || !active[0].Preempting || active[0].GPUs != 2 || active[0].StartedAt == nil {
		t.Fatalf("active attempts while preempting: %+v", active)
	}
	st, ok := lifecycle.OnReport(j.Facts(), protocol.ReportCancelled, "", false)
	if !ok || st.To != protocol.JobQueued || st.SpendRetry {
		t.Fatalf("a preempted attempt's cancelled report: %+v %v", st, ok)
	}
	j = transition(t, s, j, store.JobTransition{Step: st, Now: at(time.Hour + time.Minute)})
	equal(t, []any{j.Status, j.PreemptedBy, j.RetriesUsed, j.WorkerID}, []any{protocol.JobQueued, "", 0, ""}, "requeued")
	as := attempts(t, s, j.ID)
	equal(t, as[0].Outcome, protocol.OutcomePreempted, "attempt outcome")
	days, err := s.TeamUsage(t.Context(), "2030-01-01")
	noErr(t, err, "TeamUsage")
	// Two GPUs from the acknowledgement at t0 to the end an hour and a
	// minute later.
	want := 2 * (time.Hour + time.Minute).Seconds()
	if len(days) != 1 || days[0].Team != "nlp" || days[0].Day != "2030-01-02" || math.Abs(days[0].GPUSeconds-want) > 0.01 {
		t.Fatalf("usage = %+v, want nlp 2030-01-02 %v", days, want)
	}
}

func testTeamUsageDays(t *testing.T, s store.Store) {
	// Acknowledged at 18:00 on 2030-01-02, ended at 06:00 on 2030-01-03:
	// two GPUs for 6 hours on each day.
	ack := time.Date(2030, 1, 2, 18, 0, 0, 0, time.UTC)
	j := runningOn(t, s, "vision", ack)
	transition(t, s, j, store.JobTransition{Step: lifecycle.Step{To: protocol.JobCompleted, By: lifecycle.Report,
		EndAttempt: protocol.OutcomeCompleted}, Now: ack.Add(12 * time.Hour)})
	// A second attempt that never started adds nothing.
	j2 := newJob(t, s, teamJob("vision", 0))
	w := newWorker(t, s)
	j2, _, err := s.ClaimJob(t.Context(), store.ClaimRequest{WorkerID: w.ID, JobID: j2.ID, UploadTokenHash: "up",
		AckDeadline: at(time.Minute), Now: at(0)})
	noErr(t, err, "ClaimJob")
	transition(t, s, j2, store.JobTransition{Step: lifecycle.Step{To: protocol.JobQueued, By: lifecycle.Deadline,
		EndAttempt: protocol.OutcomeWithdrawn}, Now: at(2 * time.Minute)})
	days, err := s.TeamUsage(t.Context(), "2030-01-01")
	noErr(t, err, "TeamUsage")
	// Each day's use is as old as the middle of its part: 21:00 and 03:00.
	equal(t, days, []store.TeamDay{
		{Team: "vision", Day: "2030-01-02", GPUSeconds: 6 * 3600 * 2, UsedAt: ack.Add(3 * time.Hour)},
		{Team: "vision", Day: "2030-01-03", GPUSeconds: 6 * 3600 * 2, UsedAt: ack.Add(9 * time.Hour)}}, "usage by day")
	days, err = s.TeamUsage(t.Context(), "2030-01-03")
	noErr(t, err, "TeamUsage from a day")
	equal(t, len(days), 1, "days from 2030-01-03")
}

func testTeamUsageReported(t *testing.T, s store.Store) {
	j := runningOn(t, s, "nlp", at(0))
	transition(t, s, j, store.JobTransition{Step: lifecycle.Step{To: protocol.JobCompleted, By: lifecycle.Report,
		EndAttempt: protocol.OutcomeCompleted}, Usage: &protocol.Usage{GPUSeconds: 1234}, Now: at(time.Hour)})
	days, err := s.TeamUsage(t.Context(), "2030-01-01")
	noErr(t, err, "TeamUsage")
	equal(t, days, []store.TeamDay{{Team: "nlp", Day: "2030-01-02", GPUSeconds: 1234, UsedAt: at(30 * time.Minute)}}, "the worker's figure")
}
