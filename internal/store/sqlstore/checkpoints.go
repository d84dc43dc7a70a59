package sqlstore

import (
	"context"

	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

const checkpointCols = `job_id, attempt, name, step, bytes, files, created_at`

func scanCheckpoint(r scanner) (store.Checkpoint, error) {
	var c store.Checkpoint
	err := r.Scan(&c.JobID, &c.Attempt, &c.Name, &c.Step, &c.Bytes, jsonCol{&c.Files}, timeCol{&c.CreatedAt})
	return c, err
}

// newestFirst orders a job's checkpoints as ListCheckpoints promises.
const newestFirst = ` ORDER BY step DESC, attempt DESC, name`

// PutCheckpoint records c and forgets all but the job's newest keep.
func (s *Store) PutCheckpoint(ctx context.Context, c store.Checkpoint, keep int) ([]store.Checkpoint, error) {
	c.CreatedAt = now(c.CreatedAt)
	files, err := jsonArg(c.Files)
	if err != nil {
		return nil, err
	}
	var forgotten []store.Checkpoint
	var emitted bool
	err = s.write(ctx, func(cn conn) error {
		forgotten, emitted = nil, false // the body may run twice (group commit)
		if _, err := cn.exec(ctx, `INSERT INTO checkpoints (`+checkpointCols+`) VALUES (?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (job_id, attempt, name) DO UPDATE SET step = excluded.step, bytes = excluded.bytes,
			files = excluded.files, created_at = excluded.created_at`,
			c.JobID, c.Attempt, c.Name, c.Step, c.Bytes, files, s.tv(c.CreatedAt)); err != nil {
			return err
		}
		all, err := listCheckpoints(ctx, cn, c.JobID)
		if err != nil {
			return err
		}
		for _, old := range all[min(max(keep, 1), len(all)):] {
			if _, err := cn.exec(ctx, `DELETE FROM checkpoints WHERE job_id = ? AND attempt = ? AND name = ?`,
				old.JobID, old.Attempt, old.Name); err != nil {
				return err
			}
			forgotten = append(forgotten, old)
		}
		// checkpoint.saved is written with the checkpoint it reports.
		emitted, err = s.emitCheckpoint(ctx, cn, c)
		return err
	})
	s.committed(emitted, err)
	if err != nil {
		return nil, err
	}
	return forgotten, nil
}

func listCheckpoints(ctx context.Context, c conn, jobID string) ([]store.Checkpoint, error) {
	rows, err := c.query(ctx, `SELECT `+checkpointCols+` FROM checkpoints WHERE job_id = ?`+newestFirst, jobID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.Checkpoint
	for rows.Next() {
		cp, err := scanCheckpoint(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, cp)
	}
	return out, rows.Err()
}

// ListCheckpoints lists a job's checkpoints, newest first.
func (s *Store) ListCheckpoints(ctx context.Context, jobID string) ([]store.Checkpoint, error) {
	return listCheckpoints(ctx, s.reader(), jobID)
}

// DeleteCheckpoints forgets every checkpoint of a job.
func (s *Store) DeleteCheckpoints(ctx context.Context, jobID string) error {
	return s.write(ctx, func(c conn) error {
		_, err := c.exec(ctx, `DELETE FROM checkpoints WHERE job_id = ?`, jobID)
		return err
	})
}
