package sqlite

import (
	"strings"
	"testing"

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
