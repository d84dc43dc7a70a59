package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// Retention deletes in small transactions chosen by the caller's batch size,
// each reading one index range (jobs_by_end from a mark, or the audit log
// from its checkpoint), so none holds the write lock for long.

// ended is the condition retention walks by: only finished jobs have an end
// time, and it reads the jobs_by_end index. (A status condition here would
// lead SQLite's planner to the status index and a sort of every finished job;
// the deletes check the status, inside their transaction, by primary key.)
const ended = `ended_at IS NOT NULL AND ended_at < ?`

// uncached returns c without the statement cache: statements whose text
// depends on a batch's size would otherwise fill it.
func (c conn) uncached() conn { return conn{q: c.q, d: c.d} }

// EndedJobs lists finished jobs that ended before before, after the mark.
func (s *Store) EndedJobs(ctx context.Context, after store.RetentionMark, before time.Time, limit int) ([]store.EndedJob, error) {
	q, args := `SELECT id, seq, ended_at FROM jobs WHERE `+ended, []any{s.tv(before)}
	if !after.EndedAt.IsZero() {
		q += ` AND (ended_at, seq) > (?, ?)`
		args = append(args, s.tv(after.EndedAt), after.Seq)
	}
	rows, err := s.reader().query(ctx, q+` ORDER BY ended_at, seq LIMIT ?`, append(args, limitArg(limit))...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.EndedJob
	for rows.Next() {
		var j store.EndedJob
		if err := rows.Scan(&j.ID, &j.Seq, timeCol{&j.EndedAt}); err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, rows.Err()
}

// eligible narrows ids to finished jobs that ended before before, with their
// statuses, locking them where the engine locks rows.
func (s *Store) eligible(ctx context.Context, c conn, ids []string, before time.Time) (map[string]protocol.JobStatus, error) {
	out := map[string]protocol.JobStatus{}
	if len(ids) == 0 {
		return out, nil
	}
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	// By primary key only: the conditions are checked here, so no planner
	// can pick a range of the history instead.
	rows, err := c.uncached().query(ctx, `SELECT id, status, ended_at FROM jobs WHERE id IN (`+
		placeholders(len(ids))+`)`+s.d.ForUpdate, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var st protocol.JobStatus
		var end *time.Time
		if err := rows.Scan(&id, &st, nullTimeCol{&end}); err != nil {
			return nil, err
		}
		if st.Terminal() && end != nil && end.Before(before) {
			out[id] = st
		}
	}
	return out, rows.Err()
}

// deleteJobRows deletes the rows of table whose job_id is one of ids.
func deleteJobRows(ctx context.Context, c conn, table string, ids []any) error {
	_, err := c.uncached().exec(ctx, `DELETE FROM `+table+` WHERE job_id IN (`+placeholders(len(ids))+`)`, ids...)
	return err
}

func keys(m map[string]protocol.JobStatus) []any {
	out := make([]any, 0, len(m))
	for id := range m {
		out = append(out, id)
	}
	return out
}

// DeleteJobs deletes finished jobs with their attempts and logs.
func (s *Store) DeleteJobs(ctx context.Context, ids []string, before time.Time) (int, error) {
	if s.d.WritableCTEs {
		return s.deleteJobsInOne(ctx, ids, before)
	}
	n := 0
	err := s.write(ctx, func(c conn) error {
		ok, err := s.eligible(ctx, c, ids, before)
		if err != nil || len(ok) == 0 {
			return err
		}
		del := keys(ok)
		for _, table := range []string{"job_logs", "job_log_attempts", "job_log_state", "attempts", "approval_requests"} {
			if err := deleteJobRows(ctx, c, table, del); err != nil {
				return err
			}
		}
		if _, err := c.uncached().exec(ctx, `DELETE FROM jobs WHERE id IN (`+placeholders(len(del))+`)`, del...); err != nil {
			return err
		}
		deltas := map[protocol.JobStatus]int64{}
		for _, st := range ok {
			deltas[st]--
		}
		n = len(del)
		return s.countAdd(ctx, c, deltas)
	})
	return n, err
}

// The same deletes in one statement each, for engines with data-modifying
// WITH clauses (PostgreSQL): every round trip of a batch is time the batch
// holds its locks. A foreign key is checked at the end of its statement, by
// when the children are gone.
const (
	finishedIn = `SELECT id, status FROM jobs WHERE id IN (%s) AND ended_at IS NOT NULL AND ended_at < ?
		AND status IN ('completed', 'failed', 'cancelled') FOR UPDATE`
	deleteJobsCTE = `WITH j AS (` + finishedIn + `),
		l AS (DELETE FROM job_logs WHERE job_id IN (SELECT id FROM j)),
		la AS (DELETE FROM job_log_attempts WHERE job_id IN (SELECT id FROM j)),
		ls AS (DELETE FROM job_log_state WHERE job_id IN (SELECT id FROM j)),
		a AS (DELETE FROM attempts WHERE job_id IN (SELECT id FROM j)),
		ar AS (DELETE FROM approval_requests WHERE job_id IN (SELECT id FROM j)),
		d AS (DELETE FROM jobs WHERE id IN (SELECT id FROM j) RETURNING status)
		SELECT status, COUNT(*) FROM d GROUP BY status`
	deleteLogsCTE = `WITH j AS (` + finishedIn + `),
		l AS (DELETE FROM job_logs WHERE job_id IN (SELECT id FROM j)),
		la AS (DELETE FROM job_log_attempts WHERE job_id IN (SELECT id FROM j)),
		ls AS (DELETE FROM job_log_state WHERE job_id IN (SELECT id FROM j) RETURNING stored_bytes)
		SELECT COALESCE(SUM(stored_bytes), 0) FROM ls`
)

func idArgs(ids []string, before any) []any {
	args := make([]any, 0, len(ids)+1)
	for _, id := range ids {
		args = append(args, id)
	}
	return append(args, before)
}

func (s *Store) deleteJobsInOne(ctx context.Context, ids []string, before time.Time) (int, error) {
	n := 0
	if len(ids) == 0 {
		return 0, nil
	}
	err := s.write(ctx, func(c conn) error {
		rows, err := c.uncached().query(ctx, fmt.Sprintf(deleteJobsCTE, placeholders(len(ids))), idArgs(ids, s.tv(before))...)
		if err != nil {
			return err
		}
		deltas := map[protocol.JobStatus]int64{}
		for rows.Next() {
			var st protocol.JobStatus
			var k int64
			if err := rows.Scan(&st, &k); err != nil {
				rows.Close()
				return err
			}
			deltas[st] -= k
			n += int(k)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		return s.countAdd(ctx, c, deltas)
	})
	return n, err
}

func (s *Store) deleteJobLogsInOne(ctx context.Context, ids []string, before time.Time, mark store.RetentionMark) (int64, error) {
	var freed int64
	err := s.write(ctx, func(c conn) error {
		if len(ids) > 0 {
			if err := c.uncached().queryRow(ctx, fmt.Sprintf(deleteLogsCTE, placeholders(len(ids))),
				idArgs(ids, s.tv(before))...).Scan(&freed); err != nil {
				return err
			}
		}
		return s.setMark(ctx, c, store.RetainLogs, mark)
	})
	return freed, err
}

// DeleteJobLogs deletes finished jobs' logs and moves the logs mark.
func (s *Store) DeleteJobLogs(ctx context.Context, ids []string, before time.Time, mark store.RetentionMark) (int64, error) {
	if s.d.WritableCTEs {
		return s.deleteJobLogsInOne(ctx, ids, before, mark)
	}
	var freed int64
	err := s.write(ctx, func(c conn) error {
		ok, err := s.eligible(ctx, c, ids, before)
		if err != nil {
			return err
		}
		if del := keys(ok); len(del) > 0 {
			if err := c.uncached().queryRow(ctx, `SELECT COALESCE(SUM(stored_bytes), 0) FROM job_log_state
				WHERE job_id IN (`+placeholders(len(del))+`)`, del...).Scan(&freed); err != nil {
				return err
			}
			for _, table := range []string{"job_logs", "job_log_attempts", "job_log_state"} {
				if err := deleteJobRows(ctx, c, table, del); err != nil {
					return err
				}
			}
		}
		return s.setMark(ctx, c, store.RetainLogs, mark)
	})
	return freed, err
}

// RetentionMark returns kind's mark.
func (s *Store) RetentionMark(ctx context.Context, kind string) (store.RetentionMark, error) {
	var m store.RetentionMark
	err := s.reader().queryRow(ctx, `SELECT ended_at, seq FROM retention_marks WHERE kind = ?`, kind).
		Scan(timeCol{&m.EndedAt}, &m.Seq)
	if errors.Is(err, sql.ErrNoRows) {
		return store.RetentionMark{}, nil
	}
	return m, err
}

// SetRetentionMark stores kind's mark.
func (s *Store) SetRetentionMark(ctx context.Context, kind string, m store.RetentionMark) error {
	return s.write(ctx, func(c conn) error { return s.setMark(ctx, c, kind, m) })
}

func (s *Store) setMark(ctx context.Context, c conn, kind string, m store.RetentionMark) error {
	if m.EndedAt.IsZero() {
		return nil
	}
	_, err := c.exec(ctx, `INSERT INTO retention_marks (kind, ended_at, seq) VALUES (?, ?, ?)
		ON CONFLICT (kind) DO UPDATE SET ended_at = excluded.ended_at, seq = excluded.seq`, kind, s.tv(m.EndedAt), m.Seq)
	return err
}

func (s *Store) checkpoint(ctx context.Context, c conn, lock bool) (store.AuditLink, error) {
	q := `SELECT seq, hash, time FROM audit_checkpoint WHERE id = 1`
	if lock {
		q += s.d.ForUpdate
	}
	var cp store.AuditLink
	var at *time.Time
	if err := c.queryRow(ctx, q).Scan(&cp.Seq, &cp.Hash, nullTimeCol{&at}); err != nil {
		return cp, err
	}
	if at != nil {
		cp.Time = *at
	}
	return cp, nil
}

// PruneAudit deletes the oldest audit records made before before, after
// verifying them, and keeps the last one deleted as the checkpoint.
func (s *Store) PruneAudit(ctx context.Context, before time.Time, limit int) (int, store.AuditLink, error) {
	n := 0
	var cp store.AuditLink
	err := s.write(ctx, func(c conn) error {
		var err error
		if cp, err = s.checkpoint(ctx, c, true); err != nil {
			return err
		}
		rows, err := c.query(ctx, `SELECT `+auditCols+` FROM audit WHERE seq > ? ORDER BY seq LIMIT ?`, cp.Seq, limitArg(limit))
		if err != nil {
			return err
		}
		var old []audit.Record
		for rows.Next() {
			rec, err := scanAudit(rows)
			if err != nil {
				rows.Close()
				return err
			}
			if !rec.Time.Before(before) {
				break
			}
			old = append(old, rec)
		}
		rows.Close()
		if err := rows.Err(); err != nil || len(old) == 0 {
			return err
		}
		if err := audit.VerifyFrom(cp.Seq, cp.Hash, old); err != nil {
			return fmt.Errorf("audit retention: the records after the checkpoint (seq %d) do not verify, so none is deleted: %w", cp.Seq, err)
		}
		last := old[len(old)-1]
		if _, err := c.exec(ctx, `UPDATE audit_checkpoint SET seq = ?, hash = ?, time = ? WHERE id = 1`,
			last.Seq, last.Hash, s.tv(last.Time)); err != nil {
			return err
		}
		if _, err := c.exec(ctx, `DELETE FROM audit WHERE seq > ? AND seq <= ?`, cp.Seq, last.Seq); err != nil {
			return err
		}
		n, cp = len(old), store.AuditLink{Seq: last.Seq, Hash: last.Hash, Time: normTime(last.Time)}
		return nil
	})
	return n, cp, err
}

// AuditBounds returns the checkpoint and the chain head.
func (s *Store) AuditBounds(ctx context.Context) (checkpoint, head store.AuditLink, err error) {
	if checkpoint, err = s.checkpoint(ctx, s.reader(), false); err != nil {
		return
	}
	err = s.reader().queryRow(ctx, `SELECT seq, hash FROM audit_head WHERE id = 1`).Scan(&head.Seq, &head.Hash)
	return
}

// Sizes counts rows and log bytes. Jobs come from the per-status counts and
// audit records from the chain's bounds (no scan); the other tables are
// counted by the engine's cheapest way, RowCounts when the dialect has one.
func (s *Store) Sizes(ctx context.Context) (store.Sizes, error) {
	out := store.Sizes{Rows: map[string]int64{}, FileBytes: -1, FreeBytes: -1}
	n, err := s.countOf(ctx, nil)
	if err != nil {
		return out, err
	}
	out.Rows["jobs"] = int64(n)
	cp, head, err := s.AuditBounds(ctx)
	if err != nil {
		return out, err
	}
	out.Rows["audit"] = head.Seq - cp.Seq
	others := []string{"workers", "attempts", "job_logs"}
	if s.d.RowCounts != "" {
		rows, err := s.reader().query(ctx, s.d.RowCounts)
		if err != nil {
			return out, err
		}
		defer rows.Close()
		for rows.Next() {
			var table string
			var n int64
			if err := rows.Scan(&table, &n); err != nil {
				return out, err
			}
			for _, t := range others {
				if t == table {
					out.Rows[t] = n
				}
			}
		}
		if err := rows.Err(); err != nil {
			return out, err
		}
	} else {
		for _, t := range others {
			var n int64
			if err := s.reader().queryRow(ctx, `SELECT COUNT(*) FROM `+t).Scan(&n); err != nil {
				return out, err
			}
			out.Rows[t] = n
		}
	}
	err = s.reader().queryRow(ctx, `SELECT COALESCE(SUM(stored_bytes), 0) FROM job_log_state`).Scan(&out.LogBytes)
	return out, err
}

// ProbeWrite rewrites the checkpoint row as it is.
func (s *Store) ProbeWrite(ctx context.Context) error {
	return s.write(ctx, func(c conn) error {
		_, err := c.exec(ctx, `UPDATE audit_checkpoint SET hash = hash WHERE id = 1`)
		return err
	})
}

// Reclaim does nothing here; SQLite overrides it.
func (s *Store) Reclaim(context.Context) error { return nil }

// TryRetentionLock always succeeds here: one process owns an embedded
// database. PostgreSQL overrides it with an advisory lock.
func (s *Store) TryRetentionLock(context.Context) (func(), bool, error) { return func() {}, true, nil }
