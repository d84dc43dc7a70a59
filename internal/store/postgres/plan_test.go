package postgres

import (
	"strings"
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/pgtest"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// A team member's list of jobs and its count read jobs_by_team, the range
// of their teams' jobs, not every job. (An empty table tells nothing about
// costs, so the test only forbids the sequential scan and asks which index
// the planner can use.)
func TestTeamListReadsItsIndex(t *testing.T) {
	t.Parallel()
	s := open(t, pgtest.Start(t))
	defer s.Close()
	c, err := s.DB().Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.ExecContext(t.Context(), `SET enable_seqscan = off`); err != nil {
		t.Fatal(err)
	}
	explain := func(q string, args ...any) string {
		rows, err := c.QueryContext(t.Context(), `EXPLAIN `+q, args...)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var plan []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, line)
		}
		return strings.Join(plan, "\n")
	}
	for _, f := range []store.JobFilter{
		{Teams: []string{"nlp"}, Limit: 50},
		{Teams: []string{"nlp"}, Limit: 50, Newest: true, AfterSeq: 100},
		{Teams: []string{"nlp", "vision"}, Limit: 50},
		{Teams: []string{"default"}, Limit: 50},
	} {
		lq, largs, cq, cargs := s.JobListQueries(f)
		if plan := explain(lq, largs...); !strings.Contains(plan, "jobs_by_team") {
			t.Errorf("list of %+v, plan:\n%s", f, plan)
		}
		if plan := explain(cq, cargs...); !strings.Contains(plan, "jobs_by_team") {
			t.Errorf("count of %+v, plan:\n%s", f, plan)
		}
	}
}
