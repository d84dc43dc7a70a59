package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

const jobCols = `id, seq, config_name, config, dataloader, hf_token, target, worker_labels, gpu_count,
	min_vram_gb, priority, max_retries, retries_used, timeout_seconds, status, attempt, worker_id, error,
	progress, submitted_by, created_at, updated_at, started_at, ended_at, ack_deadline, cancel_deadline, whole_worker,
	no_checkpoints, team, preempted_by`

func scanJob(r scanner, extra ...any) (store.Job, error) {
	var j store.Job
	dest := append([]any{&j.ID, &j.Seq, &j.ConfigName, rawCol{&j.Config}, rawCol{&j.Dataloader},
		&j.HFToken, &j.Target, jsonCol{&j.WorkerLabels}, &j.GPUCount, &j.MinVRAMGB, &j.Priority,
		&j.MaxRetries, &j.RetriesUsed, &j.TimeoutSeconds, &j.Status, &j.Attempt, &j.WorkerID, &j.Error,
		rawCol{&j.Progress}, &j.SubmittedBy, timeCol{&j.CreatedAt}, timeCol{&j.UpdatedAt},
		nullTimeCol{&j.StartedAt}, nullTimeCol{&j.EndedAt}, nullTimeCol{&j.AckDeadline},
		nullTimeCol{&j.CancelDeadline}, &j.WholeWorker, &j.NoCheckpoints, &j.Team, &j.PreemptedBy}, extra...)
	err := r.Scan(dest...)
	return j, err
}

// InsertJob stores a new job and returns it with its Seq. Empty ID, Status and
// CreatedAt default to a new ID, queued and now.
func (s *Store) InsertJob(ctx context.Context, j store.Job, rec *audit.Record) (store.Job, error) {
	return s.InsertTeamJob(ctx, j, 0, rec)
}

// InsertTeamJob is InsertJob within the team's queue limit (maxQueued > 0),
// counted in the same transaction.
func (s *Store) InsertTeamJob(ctx context.Context, j store.Job, maxQueued int, rec *audit.Record) (store.Job, error) {
	j = prepareJob(j)
	var emitted bool
	err := s.write(ctx, func(c conn) error {
		if maxQueued > 0 {
			n, err := s.countQueuedOfTeam(ctx, c, j.Team)
			if err != nil {
				return err
			}
			if n >= maxQueued {
				return fmt.Errorf("team %q has %d jobs queued or waiting, its max_queued is %d: %w", j.Team, n, maxQueued, store.ErrQueueFull)
			}
		}
		if err := s.resolveDependencies(ctx, c, &j); err != nil {
			return err
		}
		if err := s.insertJobRow(ctx, c, &j); err != nil {
			return err
		}
		if err := s.writeDependencies(ctx, c, j); err != nil {
			return err
		}
		var err error
		if emitted, err = s.emitJob(ctx, c, store.Job{}, j, nil); err != nil {
			return err
		}
		return s.countNewJob(ctx, c, j, rec)
	})
	s.committed(emitted, err)
	if err != nil {
		return store.Job{}, err
	}
	return asRead(j), nil
}

// asRead is j as a read returns it: reads leave the dependencies out.
func asRead(j store.Job) store.Job {
	j.DependsOn, j.HoldUnmet = nil, false
	return j
}

// countNewJob counts a job just inserted (its submitter's day, its
// status) and appends the submit's audit record, in the insert's
// transaction.
func (s *Store) countNewJob(ctx context.Context, c conn, j store.Job, rec *audit.Record) error {
	if err := s.countSubmit(ctx, c, j); err != nil {
		return err
	}
	if err := s.countMove(ctx, c, "", j.Status); err != nil {
		return err
	}
	return s.appendAudit(ctx, c, rec)
}

// prepareJob fills a new job's defaults. The job handed back is the one
// stored, as a read would return it, and shares no memory with the
// caller's.
func prepareJob(j store.Job) store.Job {
	if j.Team == "" {
		j.Team = "default"
	}
	if j.ID == "" {
		j.ID = protocol.NewJobID()
	}
	if j.Status == "" {
		j.Status = protocol.JobQueued
	}
	j.CreatedAt = now(j.CreatedAt)
	if j.UpdatedAt.IsZero() {
		j.UpdatedAt = j.CreatedAt
	}
	j.UpdatedAt = normTime(j.UpdatedAt)
	j.StartedAt, j.EndedAt = normTimePtr(j.StartedAt), normTimePtr(j.EndedAt)
	j.AckDeadline, j.CancelDeadline = normTimePtr(j.AckDeadline), normTimePtr(j.CancelDeadline)
	j.Config, j.Dataloader, j.Progress = storedRaw(j.Config), storedRaw(j.Dataloader), storedRaw(j.Progress)
	if j.Config == nil {
		j.Config = json.RawMessage("{}")
	}
	j.DependsOn = slices.Clone(j.DependsOn)
	j.WorkerLabels = maps.Clone(j.WorkerLabels)
	if j.WorkerLabels == nil {
		j.WorkerLabels = map[string]string{}
	}
	return j
}

// insertJobRow writes j's row and sets its Seq.
func (s *Store) insertJobRow(ctx context.Context, c conn, j *store.Job) error {
	args := []any{j.ID, j.ConfigName, rawArg(j.Config, "{}"), rawArg(j.Dataloader, nil), j.HFToken,
		j.Target, labelsArg(j.WorkerLabels), j.GPUCount, j.MinVRAMGB, j.Priority, j.MaxRetries,
		j.RetriesUsed, j.TimeoutSeconds, j.Status, j.Attempt, j.WorkerID, j.Error,
		rawArg(j.Progress, nil), j.SubmittedBy, s.tv(j.CreatedAt), s.tv(j.UpdatedAt),
		s.ntv(j.StartedAt), s.ntv(j.EndedAt), s.ntv(j.AckDeadline), s.ntv(j.CancelDeadline), j.WholeWorker,
		j.NoCheckpoints, j.Team, j.PreemptedBy}
	// seq comes from the engine: the column list is jobCols with seq moved last.
	return c.queryRow(ctx, `INSERT INTO jobs (id, config_name, config, dataloader, hf_token, target,
		worker_labels, gpu_count, min_vram_gb, priority, max_retries, retries_used, timeout_seconds,
		status, attempt, worker_id, error, progress, submitted_by, created_at, updated_at, started_at,
		ended_at, ack_deadline, cancel_deadline, whole_worker, no_checkpoints, team, preempted_by, seq) VALUES (`+placeholders(len(args))+`, `+s.d.NextSeq+`)
		RETURNING seq`, args...).Scan(&j.Seq)
}

func (s *Store) getJob(ctx context.Context, c conn, id string, lock bool) (store.Job, error) {
	q := `SELECT ` + jobCols + ` FROM jobs WHERE id = ?`
	if lock {
		q += s.d.ForUpdate
	}
	j, err := scanJob(c.queryRow(ctx, q, id))
	return j, noRows(err, "job", id)
}

// GetJob returns one job.
func (s *Store) GetJob(ctx context.Context, id string) (store.Job, error) {
	return s.getJob(ctx, s.reader(), id, false)
}

// RecentEndsQuery is CountJobsEndedBetween's statement (with ? for the
// upper bound's condition), exported for the engines' query-plan tests.
const RecentEndsQuery = `SELECT status, COUNT(*) FROM (SELECT status FROM jobs
	WHERE ended_at IS NOT NULL AND ended_at >= ? AND ended_at < ? ORDER BY ended_at, seq) AS recent GROUP BY status`

// CountJobsEndedSince counts terminal jobs by status that ended at or after
// since.
func (s *Store) CountJobsEndedSince(ctx context.Context, since time.Time) (map[protocol.JobStatus]int, error) {
	return s.CountJobsEndedBetween(ctx, since, time.Time{})
}

// CountJobsEndedBetween counts terminal jobs by status that ended in [from,
// to); a zero to has no upper bound. It reads that part of jobs_by_end
// (ended_at, seq, status) and nothing else: only terminal jobs have an end
// time. The inner query's ORDER BY is what keeps it there: asked to group by
// status directly, SQLite's planner walks jobs_by_status (already in status
// order) through the whole history instead.
func (s *Store) CountJobsEndedBetween(ctx context.Context, from, to time.Time) (map[protocol.JobStatus]int, error) {
	if to.IsZero() {
		to = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	return s.statusCounts(ctx, RecentEndsQuery, s.tv(from), s.tv(to))
}

// QueuePositionQuery answers QueuePosition; exported for the engines'
// query-plan tests.
//
// The jobs ahead of (priority, seq) are the queued ones less those of a lower
// priority and those of the same priority from seq on. Counted that way, in
// one statement (one snapshot) with the queued total from job_counts, the
// index walks only the lower priorities and the jobs behind: for a job just
// submitted, nearly nothing, where counting the jobs ahead would walk the
// whole queue on every submit.
const QueuePositionQuery = `SELECT COALESCE((SELECT n FROM job_counts WHERE status = ?), 0)
	- (SELECT COUNT(*) FROM jobs WHERE status = ? AND priority < ?)
	- (SELECT COUNT(*) FROM jobs WHERE status = ? AND priority = ? AND seq >= ?)`

// QueuePosition counts the queued jobs ahead of (priority, seq) in claim order.
func (s *Store) QueuePosition(ctx context.Context, priority int, seq int64) (int, error) {
	var n int
	q := protocol.JobQueued
	err := s.reader().queryRow(ctx, QueuePositionQuery, q, q, priority, q, priority, seq).Scan(&n)
	return max(n, 0), err
}

const attemptCols = `job_id, number, worker_id, upload_token_hash, dispatched_at, acked_at, ended_at, outcome, error,
	cpu_seconds, peak_memory_bytes, gpus, gpu_seconds, peak_gpu_memory_bytes, gpu_utilization_pct, gpu_events`

func scanAttempt(r scanner) (store.Attempt, error) {
	var a store.Attempt
	var cpu, gpuSeconds, gpuUtil sql.NullFloat64
	var peak, gpuPeak sql.NullInt64
	var gpus string
	var events []string
	err := r.Scan(&a.JobID, &a.Number, &a.WorkerID, &a.UploadTokenHash, timeCol{&a.DispatchedAt},
		nullTimeCol{&a.AckedAt}, nullTimeCol{&a.EndedAt}, &a.Outcome, &a.Error, &cpu, &peak, &gpus,
		&gpuSeconds, &gpuPeak, &gpuUtil, jsonCol{&events})
	if cpu.Valid || peak.Valid || gpuSeconds.Valid {
		a.Usage = &protocol.Usage{CPUSeconds: cpu.Float64, PeakMemoryBytes: uint64(max(peak.Int64, 0)),
			GPUSeconds: gpuSeconds.Float64, PeakGPUMemoryBytes: uint64(max(gpuPeak.Int64, 0)), GPUEvents: events}
		if gpuUtil.Valid {
			a.Usage.GPUUtilizationPct = &gpuUtil.Float64
		}
	}
	a.GPUs = parseIndices(gpus)
	return a, err
}

// ListAttempts returns a job's attempts, first first. An unknown job is ErrNotFound.
func (s *Store) ListAttempts(ctx context.Context, jobID string) ([]store.Attempt, error) {
	rows, err := s.reader().query(ctx, `SELECT `+attemptCols+` FROM attempts WHERE job_id = ? ORDER BY number`, jobID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.Attempt
	for rows.Next() {
		a, err := scanAttempt(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		if _, err := s.GetJob(ctx, jobID); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// indicesArg stores GPU indices as "0,3"; parseIndices reads them back.
func indicesArg(ix []int) string {
	parts := make([]string, len(ix))
	for i, n := range ix {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ",")
}

func parseIndices(s string) []int {
	if s == "" {
		return nil
	}
	var out []int
	for _, p := range strings.Split(s, ",") {
		if n, err := strconv.Atoi(p); err == nil {
			out = append(out, n)
		}
	}
	return out
}
