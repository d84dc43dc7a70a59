package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// TruncationMarker is the line stored after the last bytes that fit the cap.
func TruncationMarker(limit int64) string {
	return fmt.Sprintf("\n[log truncated: limit of %d bytes reached]\n", limit)
}

// AppendLog stores data at offset of (job, attempt); see store.Store.
//
// Each attempt has a size: how far into the worker's output the store has
// accounted for. Bytes before it are already stored (or were dropped by the
// cap), so a resent chunk stores only its new tail and a chunk starting past it
// is a gap. The job's stored byte count and truncation flag live in
// job_log_state; locking that row serializes appends to one job.
func (s *Store) AppendLog(ctx context.Context, jobID string, attempt int, offset int64, data []byte, limit int64) (int64, bool, error) {
	if attempt < 1 || offset < 0 {
		return 0, false, fmt.Errorf("store: log chunk at attempt %d offset %d: want attempt ≥ 1, offset ≥ 0", attempt, offset)
	}
	var size int64
	var truncated bool
	err := s.write(ctx, func(c conn) error {
		var one int
		if err := c.queryRow(ctx, `SELECT 1 FROM jobs WHERE id = ?`, jobID).Scan(&one); err != nil {
			return noRows(err, "job", jobID)
		}
		if _, err := c.exec(ctx, `INSERT INTO job_log_state (job_id, stored_bytes, truncated) VALUES (?, 0, ?)
			ON CONFLICT (job_id) DO NOTHING`, jobID, false); err != nil {
			return err
		}
		var stored int64
		if err := c.queryRow(ctx, `SELECT stored_bytes, truncated FROM job_log_state WHERE job_id = ?`+s.d.ForUpdate,
			jobID).Scan(&stored, &truncated); err != nil {
			return err
		}
		err := c.queryRow(ctx, `SELECT size FROM job_log_attempts WHERE job_id = ? AND attempt = ?`, jobID, attempt).Scan(&size)
		if errors.Is(err, sql.ErrNoRows) {
			size, err = 0, nil
		}
		if err != nil {
			return err
		}
		if offset > size {
			return fmt.Errorf("log of job %s attempt %d has %d bytes, chunk starts at %d: %w",
				jobID, attempt, size, offset, store.ErrConflict)
		}
		end := offset + int64(len(data))
		if end <= size {
			return nil // all of it is stored already
		}
		fresh := data[size-offset:]
		if !truncated {
			chunk := fresh
			if limit > 0 && stored+int64(len(fresh)) > limit {
				keep := max(0, limit-stored) // limit may have shrunk since the last call
				chunk = append(fresh[:keep:keep], TruncationMarker(limit)...)
				stored, truncated = limit, true
			} else {
				stored += int64(len(fresh))
			}
			if _, err := c.exec(ctx, `INSERT INTO job_logs (job_id, attempt, "offset", data) VALUES (?, ?, ?, ?)`,
				jobID, attempt, size, chunk); err != nil {
				return err
			}
			if _, err := c.exec(ctx, `UPDATE job_log_state SET stored_bytes = ?, truncated = ? WHERE job_id = ?`,
				stored, truncated, jobID); err != nil {
				return err
			}
		}
		size = end
		_, err = c.exec(ctx, `INSERT INTO job_log_attempts (job_id, attempt, size) VALUES (?, ?, ?)
			ON CONFLICT (job_id, attempt) DO UPDATE SET size = excluded.size`, jobID, attempt, size)
		return err
	})
	return size, truncated, err
}

// ReadLog returns the chunks after cursor in (attempt, offset) order, at most
// maxBytes in all but always at least one chunk (maxBytes ≤ 0: no limit). A
// chunk that straddles the cursor is returned from the cursor on.
func (s *Store) ReadLog(ctx context.Context, jobID string, after store.LogCursor, maxBytes int) ([]store.LogChunk, error) {
	rows, err := s.reader().query(ctx, `SELECT attempt, "offset", data FROM job_logs WHERE job_id = ?
		AND (attempt > ? OR (attempt = ? AND "offset" + length(data) > ?)) ORDER BY attempt, "offset"`,
		jobID, after.Attempt, after.Attempt, after.Offset)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.LogChunk
	total := 0
	for rows.Next() {
		var ch store.LogChunk
		if err := rows.Scan(&ch.Attempt, &ch.Offset, &ch.Data); err != nil {
			return nil, err
		}
		if ch.Attempt == after.Attempt && ch.Offset < after.Offset {
			ch.Data = ch.Data[after.Offset-ch.Offset:]
			ch.Offset = after.Offset
		}
		if maxBytes > 0 && len(out) > 0 && total+len(ch.Data) > maxBytes {
			break
		}
		total += len(ch.Data)
		out = append(out, ch)
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
