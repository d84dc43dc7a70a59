package sqlstore

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// TeamQueueIndex is the index EnsureTeamQueueIndex makes.
const TeamQueueIndex = `CREATE INDEX IF NOT EXISTS jobs_team_queue ON jobs (team, priority DESC, seq) WHERE status = 'queued'`

// EnsureTeamQueueIndex makes jobs_team_queue if it does not exist.
func (s *Store) EnsureTeamQueueIndex(ctx context.Context) error {
	return s.write(ctx, func(c conn) error {
		_, err := c.exec(ctx, TeamQueueIndex)
		return err
	})
}

// CountQueuedOfTeam counts a team's queued jobs (jobs_team_queue).
func (s *Store) CountQueuedOfTeam(ctx context.Context, team string) (int, error) {
	return s.countQueuedOfTeam(ctx, s.reader(), team)
}

func (s *Store) countQueuedOfTeam(ctx context.Context, c conn, team string) (int, error) {
	var n int
	err := c.queryRow(ctx, `SELECT COUNT(*) FROM jobs WHERE status IN (?, ?) AND team = ?`, protocol.JobQueued, protocol.JobWaiting, team).Scan(&n)
	return n, err
}

// ListActiveAttempts lists the attempts out on workers, each with its job's
// team and priority and the GPUs it holds.
func (s *Store) ListActiveAttempts(ctx context.Context) ([]store.ActiveAttempt, error) {
	rows, err := s.reader().query(ctx, `SELECT j.id, j.team, j.worker_id, j.status, j.priority, j.whole_worker,
		a.gpus, a.acked_at, j.preempted_by FROM jobs j JOIN attempts a ON a.job_id = j.id AND a.number = j.attempt
		WHERE j.status IN (?, ?, ?)`, protocol.JobDispatched, protocol.JobRunning, protocol.JobCanceling)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.ActiveAttempt
	for rows.Next() {
		var a store.ActiveAttempt
		var gpus, preemptedBy string
		if err := rows.Scan(&a.JobID, &a.Team, &a.WorkerID, &a.Status, &a.Priority, &a.WholeWorker, &gpus,
			nullTimeCol{&a.StartedAt}, &preemptedBy); err != nil {
			return nil, err
		}
		a.GPUs, a.Preempting = len(parseIndices(gpus)), preemptedBy != ""
		out = append(out, a)
	}
	return out, rows.Err()
}

// TeamsWithJobs lists the teams of unfinished jobs (jobs_by_status).
func (s *Store) TeamsWithJobs(ctx context.Context) ([]string, error) {
	rows, err := s.reader().query(ctx, `SELECT DISTINCT team FROM jobs WHERE status IN (?, ?, ?, ?) ORDER BY team`,
		protocol.JobQueued, protocol.JobDispatched, protocol.JobRunning, protocol.JobCanceling)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// TeamUsage lists team_usage from fromDay on, by team and day.
func (s *Store) TeamUsage(ctx context.Context, fromDay string) ([]store.TeamDay, error) {
	rows, err := s.reader().query(ctx, `SELECT team, day, gpu_seconds, usage_time FROM team_usage WHERE day >= ? ORDER BY team, day`, fromDay)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.TeamDay
	for rows.Next() {
		var d store.TeamDay
		var usageTime float64
		if err := rows.Scan(&d.Team, &d.Day, &d.GPUSeconds, &usageTime); err != nil {
			return nil, err
		}
		if d.GPUSeconds > 0 {
			d.UsedAt = time.Unix(0, int64(usageTime/d.GPUSeconds*1e9)).UTC()
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// addTeamUsage adds an ending attempt's GPU-seconds to its team's days: what
// the worker reported, or else its GPUs times the time since it was
// acknowledged (an attempt never acknowledged used nothing), spread over
// the UTC days it ran. Called in the transaction that ends the attempt,
// after the job and attempt rows and before the counts (see counts.go).
func (s *Store) addTeamUsage(ctx context.Context, c conn, team string, gpus int, acked *time.Time, end time.Time, reported *protocol.Usage) error {
	if acked == nil || !end.After(*acked) {
		return nil
	}
	total := float64(gpus) * end.Sub(*acked).Seconds()
	if reported != nil && reported.GPUSeconds > 0 {
		total = reported.GPUSeconds
	}
	if total <= 0 {
		return nil
	}
	days := spreadOverDays(*acked, end, total)
	keys := make([]string, 0, len(days))
	for d := range days {
		keys = append(keys, d)
	}
	sort.Strings(keys) // rows in one order, so two enders cannot deadlock
	values, args := "", make([]any, 0, 4*len(keys))
	for i, d := range keys {
		if i > 0 {
			values += ", "
		}
		values += "(?, ?, ?, ?)"
		args = append(args, team, d, days[d].seconds, days[d].seconds*days[d].middle)
	}
	_, err := c.exec(ctx, `INSERT INTO team_usage (team, day, gpu_seconds, usage_time) VALUES `+values+`
		ON CONFLICT (team, day) DO UPDATE SET gpu_seconds = team_usage.gpu_seconds + excluded.gpu_seconds,
		usage_time = team_usage.usage_time + excluded.usage_time`, args...)
	if err != nil {
		return fmt.Errorf("team usage: %w", err)
	}
	return nil
}

// maxUsageDays bounds how many days one attempt's use is spread over; the
// rest goes to the earliest of them.
const maxUsageDays = 400

// dayPart is the share of an attempt's GPU-seconds that fell on one day,
// and the Unix time (seconds) of the middle of its time that day.
type dayPart struct{ seconds, middle float64 }

// spreadOverDays splits total between the UTC days of [from, to) in
// proportion to the time in each.
func spreadOverDays(from, to time.Time, total float64) map[string]dayPart {
	from, to = from.UTC(), to.UTC()
	out := map[string]dayPart{}
	span := to.Sub(from).Seconds()
	start := from
	if to.Sub(from) > maxUsageDays*24*time.Hour {
		start = to.Add(-maxUsageDays * 24 * time.Hour)
	}
	unix := func(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
	for d := start; d.Before(to); {
		next := time.Date(d.Year(), d.Month(), d.Day()+1, 0, 0, 0, 0, time.UTC)
		end := next
		if to.Before(end) {
			end = to
		}
		part := end.Sub(d).Seconds()
		out[d.Format(store.DayFormat)] = dayPart{seconds: total * part / span, middle: (unix(d) + unix(end)) / 2}
		d = next
	}
	if start.After(from) { // the rest of a very long attempt, on its earliest day kept
		p := out[start.Format(store.DayFormat)]
		extra := total * start.Sub(from).Seconds() / span
		p.middle = (p.middle*p.seconds + unix(start)*extra) / (p.seconds + extra)
		p.seconds += extra
		out[start.Format(store.DayFormat)] = p
	}
	return out
}
