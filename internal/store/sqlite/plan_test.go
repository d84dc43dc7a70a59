package sqlite

import (
	"strings"
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/store/sqlstore"
)

// The count of jobs that ended in a recent window reads only the window's
// part of jobs_by_end. Written as a plain GROUP BY, SQLite's planner walked
// jobs_by_status through every job instead: stats took 150 ms and more with
// a million finished jobs. (Without ANALYZE statistics the planner decides
// the same for an empty table as for a large one, so an empty one tells.)
func TestRecentEndsReadsTheWindowOnly(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	text := queryPlan(t, s, sqlstore.RecentEndsQuery, int64(0), int64(1))
	if !strings.Contains(text, "INDEX jobs_by_end (ended_at>? AND ended_at<?)") || strings.Contains(text, "jobs_by_status") {
		t.Fatalf("plan:\n%s", text)
	}
}

// A submit's queue position walks only the lower priorities and the jobs
// behind it in jobs_queue, never the jobs ahead (the whole queue, for a job
// just submitted).
func TestQueuePositionReadsAroundTheJob(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	text := queryPlan(t, s, sqlstore.QueuePositionQuery, "queued", "queued", 10, "queued", 10, int64(5))
	for _, want := range []string{"INDEX jobs_queue (status=? AND priority<?)", "INDEX jobs_queue (status=? AND priority=? AND seq>?)"} {
		if !strings.Contains(text, want) {
			t.Fatalf("plan lacks %q:\n%s", want, text)
		}
	}
}

// The counts of failed deliveries, for /metrics and the webhook list, read
// their partial index, not every delivery kept.
func TestFailedDeliveryCountsUseTheirIndex(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	for _, one := range []bool{false, true} {
		var args []any
		if one {
			args = []any{"wh_x"}
		}
		text := queryPlan(t, s, sqlstore.DeliveryCountQuery("failed", one), args...)
		if !strings.Contains(text, "webhook_deliveries_failed") {
			t.Fatalf("one subscription %v, plan:\n%s", one, text)
		}
	}
}

// Once made, the team queue index serves a team's head of the queue and
// its count, instead of the whole queue.
func TestTeamQueueReadsItsIndex(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	if err := s.EnsureTeamQueueIndex(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`SELECT id FROM jobs WHERE status = ? AND team = ? ORDER BY priority DESC, seq ASC LIMIT 16`,
		`SELECT COUNT(*) FROM jobs WHERE status = ? AND team = ?`,
	} {
		if text := queryPlan(t, s, q, "queued", "nlp"); !strings.Contains(text, "jobs_team_queue") || strings.Contains(text, "TEMP B-TREE") {
			t.Fatalf("%s\nplan:\n%s", q, text)
		}
	}
}

// queryPlan is SQLite's EXPLAIN QUERY PLAN of query, one line per step.
func queryPlan(t *testing.T, s *Store, query string, args ...any) string {
	t.Helper()
	rows, err := s.DB().QueryContext(t.Context(), `EXPLAIN QUERY PLAN `+query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(plan, "\n")
}

// A team member's list of jobs (the teams they may see) reads, for the page
// and for the count, the ranges of jobs_by_team that hold their teams' jobs,
// never every team's jobs; one team's page reads the index in order, and
// several teams' merge one bounded range per team.
func TestTeamListReadsItsIndex(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	for _, f := range []store.JobFilter{
		{Teams: []string{"nlp"}, Limit: 50},
		{Teams: []string{"nlp"}, Limit: 50, Newest: true, AfterSeq: 100},
		{Teams: []string{"nlp", "vision"}, Limit: 50},
		{Teams: []string{"default"}, Limit: 50},
		{Teams: []string{"nlp"}, Statuses: []protocol.JobStatus{protocol.JobQueued, protocol.JobRunning}, Limit: 50},
	} {
		lq, largs, cq, cargs := s.JobListQueries(f)
		list, count := queryPlan(t, s, lq, largs...), queryPlan(t, s, cq, cargs...)
		if !strings.Contains(list, "jobs_by_team (team=?") || strings.Contains(list, "SCAN jobs") ||
			(len(f.Teams) == 1 && len(f.Statuses) == 0 && f.Teams[0] != "default" && strings.Contains(list, "TEMP B-TREE")) {
			t.Errorf("list of %+v, plan:\n%s", f, list)
		}
		if !strings.Contains(count, "jobs_by_team (team=?)") || strings.Contains(count, "SCAN jobs") {
			t.Errorf("count of %+v, plan:\n%s", f, count)
		}
	}
}
