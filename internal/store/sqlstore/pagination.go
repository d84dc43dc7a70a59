package sqlstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// everyStatus is every job status: a list by worker alone reads one index
// range per status and merges them.
var everyStatus = []protocol.JobStatus{protocol.JobPendingApproval, protocol.JobQueued, protocol.JobDispatched, protocol.JobRunning,
	protocol.JobCanceling, protocol.JobCompleted, protocol.JobFailed, protocol.JobCancelled}

// ListJobs returns a page of jobs in Seq order (descending with Newest)
// and how many match in all (-1 with a WorkerID: not counted).
//
// Every page costs O(page), whatever the history: each query reads one index
// range (the Seq index, jobs_by_status or jobs_by_worker) from the cursor on
// and stops after the page. Several statuses, or a worker without a status,
// read one such range per status and merge them: an index on (status, seq)
// is ordered by seq within one status only. Offset still works but reads the
// rows it skips.
func (s *Store) ListJobs(ctx context.Context, f store.JobFilter) ([]store.Job, int, error) {
	total := -1
	if f.WorkerID == "" && f.Teams != nil {
		n, err := s.countOfTeams(ctx, f)
		if err != nil {
			return nil, 0, err
		}
		total = n
	} else if f.WorkerID == "" {
		n, err := s.countOf(ctx, f.Statuses)
		if err != nil {
			return nil, 0, err
		}
		total = n
	}
	q, args := s.listQuery(f)
	rows, err := s.reader().query(ctx, q, args...)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	var out []store.Job
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, j)
	}
	return out, total, rows.Err()
}

// listQuery builds ListJobs' statement.
func (s *Store) listQuery(f store.JobFilter) (string, []any) {
	dir, cmp := "ASC", ">"
	if f.Newest {
		dir, cmp = "DESC", "<"
	}
	statuses := dedupe(f.Statuses)
	if f.WorkerID != "" && len(statuses) == 0 {
		statuses = everyStatus
	}
	if len(statuses) == 0 {
		statuses = []protocol.JobStatus{""}
	}
	// One branch per status and per team, each one index range in seq
	// order: jobs_by_team or jobs_by_status hold one team's or one
	// status's jobs in seq order, not several's.
	teams := []string{""}
	if f.Teams != nil {
		teams = teamValues(f.Teams)
	}
	// branch is one index range: one status (or none), one worker (or any),
	// one team (or any, when the filter names none).
	branch := func(cols string, st protocol.JobStatus, team string, limit int64) (string, []any) {
		var conds []string
		var args []any
		if st != "" {
			conds, args = append(conds, "status = ?"), append(args, st)
		}
		if f.WorkerID != "" {
			conds, args = append(conds, "worker_id = ?"), append(args, f.WorkerID)
		}
		if f.Teams != nil {
			conds, args = append(conds, "team = ?"), append(args, team)
		}
		if f.AfterSeq > 0 {
			conds, args = append(conds, "seq "+cmp+" ?"), append(args, f.AfterSeq)
		}
		where := ""
		if len(conds) > 0 {
			where = " WHERE " + strings.Join(conds, " AND ")
		}
		return `SELECT ` + cols + ` FROM jobs` + where + ` ORDER BY seq ` + dir + ` LIMIT ?`, append(args, limit)
	}
	limit := limitArg(f.Limit)
	if f.Teams != nil && len(teams) == 0 {
		// No team keeps no job.
		return `SELECT ` + jobCols + ` FROM jobs WHERE 1 = 0 LIMIT ? OFFSET ?`, []any{limit, f.Offset}
	}
	if len(statuses) == 1 && len(teams) == 1 {
		q, args := branch(jobCols, statuses[0], teams[0], limit)
		return q + ` OFFSET ?`, append(args, f.Offset)
	}
	// Each branch needs at most offset+limit rows for the merged page.
	per := limit
	if per < noLimit-int64(f.Offset) {
		per += int64(f.Offset)
	}
	var parts []string
	var args []any
	for _, st := range statuses {
		for _, team := range teams {
			q, a := branch("seq", st, team, per)
			parts = append(parts, fmt.Sprintf(`SELECT seq FROM (%s) AS b%d`, q, len(parts)))
			args = append(args, a...)
		}
	}
	q := `SELECT ` + jobCols + ` FROM jobs WHERE seq IN (SELECT seq FROM (` + strings.Join(parts, ` UNION ALL `) +
		`) AS u ORDER BY seq ` + dir + ` LIMIT ? OFFSET ?) ORDER BY seq ` + dir
	return q, append(args, limit, f.Offset)
}

// teamValues are the values of jobs.team that hold teams' jobs: "" too
// for the default team's jobs from before teams.
func teamValues(teams []string) []string {
	var out []string
	for _, t := range teams {
		out = append(out, t)
		if t == "default" {
			out = append(out, "")
		}
	}
	return out
}

// teamsCond keeps the jobs of teams: "team IN (...)". No team keeps no job.
func teamsCond(teams []string) (string, []any) {
	var marks []string
	var args []any
	for _, t := range teamValues(teams) {
		marks, args = append(marks, "?"), append(args, t)
	}
	if len(marks) == 0 {
		return "1 = 0", nil
	}
	return "team IN (" + strings.Join(marks, ", ") + ")", args
}

// countOfTeams counts the jobs of f's teams in f's statuses. Unlike
// countOf it reads the rows (jobs_by_team): the per-status counters are not
// kept by team.
func (s *Store) countOfTeams(ctx context.Context, f store.JobFilter) (int, error) {
	q, args := teamCountQuery(f)
	var n int
	err := s.reader().queryRow(ctx, q, args...).Scan(&n)
	return n, err
}

// teamCountQuery builds countOfTeams' statement.
func teamCountQuery(f store.JobFilter) (string, []any) {
	cond, args := teamsCond(f.Teams)
	q := `SELECT COUNT(*) FROM jobs WHERE ` + cond
	if sts := dedupe(f.Statuses); len(sts) > 0 {
		marks := make([]string, len(sts))
		for i, st := range sts {
			marks[i], args = "?", append(args, st)
		}
		q += ` AND status IN (` + strings.Join(marks, ", ") + `)`
	}
	return q, args
}

// JobListQueries are the statements ListJobs runs for f, in the engine's
// placeholders: the page and, for a list of teams, the count. Exported for
// the engines' query plan tests.
func (s *Store) JobListQueries(f store.JobFilter) (list string, listArgs []any, count string, countArgs []any) {
	list, listArgs = s.listQuery(f)
	count, countArgs = teamCountQuery(f)
	return s.d.rebind(list), listArgs, s.d.rebind(count), countArgs
}

func dedupe(sts []protocol.JobStatus) []protocol.JobStatus {
	var out []protocol.JobStatus
	seen := map[protocol.JobStatus]bool{}
	for _, st := range sts {
		if !seen[st] {
			seen[st] = true
			out = append(out, st)
		}
	}
	return out
}
