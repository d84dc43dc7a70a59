package sqlstore

import (
	"context"
	"sort"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// The per-status job counts live in job_counts, one row per status, changed
// in the same transaction as the job rows they count: InsertJob, ClaimJob,
// TransitionJob and retention's DeleteJobs. Counting is then one small read
// whatever the size of the history.
//
// On PostgreSQL a count row is locked until its transaction ends, like the
// audit chain head. So the counts are changed after every other row the
// transaction changes (jobs, attempts, GPU leases, the worker), just before
// the audit head: a transaction holding a count row then waits only for
// other count rows or the head, never for a job or worker row, and a claim
// (worker, then job) cannot deadlock with a requeue (job, then worker)
// through them. Rows are changed in the order of their status names, so two
// transactions moving jobs in opposite directions (queued → dispatched,
// dispatched → queued) cannot wait on each other either.

// countMove records that one job left status from and entered status to
// ("" for none: an insert or a delete).
func (s *Store) countMove(ctx context.Context, c conn, from, to protocol.JobStatus) error {
	if from == to {
		return nil
	}
	deltas := map[protocol.JobStatus]int64{}
	if from != "" {
		deltas[from]--
	}
	if to != "" {
		deltas[to]++
	}
	return s.countAdd(ctx, c, deltas)
}

// countAdd applies deltas to the counts in one statement, its rows in
// status-name order (both engines change a multi-row insert's rows in the
// order given).
func (s *Store) countAdd(ctx context.Context, c conn, deltas map[protocol.JobStatus]int64) error {
	statuses := make([]string, 0, len(deltas))
	for st, d := range deltas {
		if d != 0 {
			statuses = append(statuses, string(st))
		}
	}
	if len(statuses) == 0 {
		return nil
	}
	sort.Strings(statuses)
	values, args := "", make([]any, 0, 2*len(statuses))
	for i, st := range statuses {
		if i > 0 {
			values += ", "
		}
		values += "(?, ?)"
		args = append(args, st, deltas[protocol.JobStatus(st)])
	}
	_, err := c.exec(ctx, `INSERT INTO job_counts (status, n) VALUES `+values+`
		ON CONFLICT (status) DO UPDATE SET n = job_counts.n + excluded.n`, args...)
	return err
}

// CountJobs returns how many jobs are in each status (absent: none).
func (s *Store) CountJobs(ctx context.Context) (map[protocol.JobStatus]int, error) {
	return s.statusCounts(ctx, `SELECT status, n FROM job_counts WHERE n <> 0`)
}

// statusCounts runs a query answering (status, count) rows.
func (s *Store) statusCounts(ctx context.Context, query string, args ...any) (map[protocol.JobStatus]int, error) {
	rows, err := s.reader().query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[protocol.JobStatus]int{}
	for rows.Next() {
		var st protocol.JobStatus
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			return nil, err
		}
		out[st] = n
	}
	return out, rows.Err()
}

// countOf sums the counts of statuses (every status when none is given).
func (s *Store) countOf(ctx context.Context, statuses []protocol.JobStatus) (int, error) {
	counts, err := s.CountJobs(ctx)
	if err != nil {
		return 0, err
	}
	total := 0
	if len(statuses) == 0 {
		for _, n := range counts {
			total += n
		}
		return total, nil
	}
	seen := map[protocol.JobStatus]bool{}
	for _, st := range statuses {
		if !seen[st] {
			seen[st] = true
			total += counts[st]
		}
	}
	return total, nil
}

// CountJobsIn counts the jobs in the given statuses (absent: none), from the
// per-status counts like CountJobs.
func (s *Store) CountJobsIn(ctx context.Context, statuses []protocol.JobStatus) (map[protocol.JobStatus]int, error) {
	out := map[protocol.JobStatus]int{}
	if len(statuses) == 0 {
		return out, nil
	}
	counts, err := s.CountJobs(ctx)
	if err != nil {
		return nil, err
	}
	for _, st := range statuses {
		if n := counts[st]; n != 0 {
			out[st] = n
		}
	}
	return out, nil
}
