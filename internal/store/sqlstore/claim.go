package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/simpletuner/simpletuner-orchestration/internal/lifecycle"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// ClaimJob gives a queued job to a worker with room for it: req.JobID, or
// the best queued job that req.Match accepts. The attempt's GPUs are leased
// in the same transaction; a GPU another attempt holds fails the claim with
// ErrConflict, so two claimers (two replicas on one database) can never hand
// out one GPU twice.
//
// The worker row is locked first and checked, then the queue is scanned with
// SKIP LOCKED: a claimer never waits on job rows another claimer holds, so the
// only lock it waits for is the worker's, and no lock cycle can form with
// TransitionJob (job, then worker).
func (s *Store) ClaimJob(ctx context.Context, req store.ClaimRequest) (store.Job, store.Attempt, error) {
	at := now(req.Now)
	var job store.Job
	var att store.Attempt
	err := s.write(ctx, func(c conn) error {
		w, err := s.workerLoad(ctx, c, req.WorkerID)
		if err != nil {
			return fmt.Errorf("%w: %w", store.ErrConflict, err)
		}
		if !lifecycle.CanClaim(w.Status, w.Load()) {
			return fmt.Errorf("worker %s is %s running %d attempt(s): %w", w.ID, w.Status, w.Running, store.ErrConflict)
		}
		var j store.Job
		if req.JobID != "" {
			j, err = s.lockQueued(ctx, c, req.JobID)
		} else {
			j, err = s.pickQueued(ctx, c, req.Match)
		}
		if err != nil {
			return err
		}
		if _, err := lifecycle.Check(j.Status, lifecycle.Step{To: protocol.JobDispatched, By: lifecycle.Claim}); err != nil {
			return fmt.Errorf("job %s: %w: %w", j.ID, store.ErrIllegalMove, err)
		}
		j.Attempt++
		if err := s.leaseGPUs(ctx, c, w, j.ID, j.Attempt, req.GPUs); err != nil {
			return err
		}
		if _, err := c.exec(ctx, `UPDATE jobs SET status = ?, attempt = ?, worker_id = ?, ack_deadline = ?,
			error = '', started_at = NULL, cancel_deadline = NULL, updated_at = ? WHERE id = ?`,
			protocol.JobDispatched, j.Attempt, w.ID, s.tv(req.AckDeadline), s.tv(at), j.ID); err != nil {
			return err
		}
		att = store.Attempt{JobID: j.ID, Number: j.Attempt, WorkerID: w.ID,
			UploadTokenHash: req.UploadTokenHash, DispatchedAt: at, GPUs: req.GPUs}
		if _, err := c.exec(ctx, `INSERT INTO attempts (job_id, number, worker_id, upload_token_hash,
			dispatched_at, gpus) VALUES (?, ?, ?, ?, ?, ?)`, j.ID, j.Attempt, w.ID, req.UploadTokenHash, s.tv(at),
			indicesArg(req.GPUs)); err != nil {
			return err
		}
		w.Running, w.GPUsUsed = w.Running+1, w.GPUsUsed+len(req.GPUs)
		if _, err := c.exec(ctx, `UPDATE workers SET status = ?, current_job_id = ?, running = ?, gpus_used = ? WHERE id = ?`,
			lifecycle.Settle(w.Status, w.Load()), j.ID, w.Running, w.GPUsUsed, w.ID); err != nil {
			return err
		}
		// The counts, like the audit head, are locked last: see counts.go.
		if err := s.countMove(ctx, c, j.Status, protocol.JobDispatched); err != nil {
			return err
		}
		// The job as written, without reading it back.
		job = j
		job.Status, job.WorkerID, job.AckDeadline, job.UpdatedAt = protocol.JobDispatched, w.ID, normTimePtr(&req.AckDeadline), at
		job.Error, job.StartedAt, job.CancelDeadline = "", nil, nil
		return s.appendAudit(ctx, c, req.Audit)
	})
	return job, att, err
}

// leaseGPUs records that attempt n of jobID holds the worker's GPUs gpus.
// One already held, or beyond the worker's GPUs, is ErrConflict.
func (s *Store) leaseGPUs(ctx context.Context, c conn, w store.Worker, jobID string, n int, gpus []int) error {
	count := protocol.ParseGPUInfo(w.GPUInfo).Count
	for _, g := range gpus {
		if g < 0 || g >= count {
			return fmt.Errorf("worker %s has %d GPUs, not GPU %d: %w", w.ID, count, g, store.ErrConflict)
		}
		var holder string
		err := c.queryRow(ctx, `SELECT job_id FROM gpu_leases WHERE worker_id = ? AND gpu_index = ?`, w.ID, g).Scan(&holder)
		switch {
		case err == nil:
			return fmt.Errorf("GPU %d of worker %s is held by job %s: %w", g, w.ID, holder, store.ErrConflict)
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		if _, err := c.exec(ctx, `INSERT INTO gpu_leases (worker_id, gpu_index, job_id, attempt) VALUES (?, ?, ?, ?)`,
			w.ID, g, jobID, n); err != nil {
			if s.d.IsUnique(err) {
				return fmt.Errorf("GPU %d of worker %s was taken meanwhile: %w", g, w.ID, store.ErrConflict)
			}
			return err
		}
	}
	return nil
}

// ListQueued returns up to limit queued jobs in claim order, with the
// columns placement reads.
func (s *Store) ListQueued(ctx context.Context, limit int) ([]store.QueuedJob, error) {
	rows, err := s.reader().query(ctx, `SELECT id, priority, target, worker_labels, gpu_count, min_vram_gb
		FROM jobs WHERE status = ? ORDER BY priority DESC, seq ASC LIMIT ?`, protocol.JobQueued, limitArg(limit))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.QueuedJob
	for rows.Next() {
		var j store.QueuedJob
		if err := rows.Scan(&j.ID, &j.Priority, &j.Target, jsonCol{&j.WorkerLabels}, &j.GPUCount, &j.MinVRAMGB); err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, rows.Err()
}

// lockQueued locks job id if it is queued; otherwise ErrNoJob (someone
// claimed or cancelled it since the caller looked).
func (s *Store) lockQueued(ctx context.Context, c conn, id string) (store.Job, error) {
	j, err := scanJob(c.queryRow(ctx, `SELECT `+jobCols+` FROM jobs WHERE id = ? AND status = ?`+s.d.SkipLocked, id, protocol.JobQueued))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Job{}, fmt.Errorf("job %s is no longer queued: %w", id, store.ErrNoJob)
	}
	return j, err
}

// pickQueued locks up to ClaimScanLimit queued jobs in claim order and returns
// the first that match accepts. It reads them a page at a time (1, 8, 64…
// rows, each continuing after the last row read) because the first candidate
// nearly always matches, and reading all of them with their configs was most
// of a claim's cost.
func (s *Store) pickQueued(ctx context.Context, c conn, match func(store.Job) bool) (store.Job, error) {
	after, args := "", []any{protocol.JobQueued}
	for seen, page := 0, 1; seen < store.ClaimScanLimit; page *= 8 {
		n := min(page, store.ClaimScanLimit-seen)
		rows, err := c.query(ctx, `SELECT `+jobCols+` FROM jobs WHERE status = ?`+after+`
			ORDER BY priority DESC, seq ASC LIMIT ?`+s.d.SkipLocked, append(args, n)...)
		if err != nil {
			return store.Job{}, err
		}
		// Read every candidate before matching: the transaction's connection is
		// busy until the rows are closed.
		var cands []store.Job
		for rows.Next() {
			j, err := scanJob(rows)
			if err != nil {
				rows.Close()
				return store.Job{}, err
			}
			cands = append(cands, j)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return store.Job{}, err
		}
		for _, j := range cands {
			if match == nil || match(j) {
				return j, nil
			}
		}
		if len(cands) < n {
			break
		}
		seen += len(cands)
		last := cands[len(cands)-1]
		after = ` AND (priority < ? OR (priority = ? AND seq > ?))`
		args = []any{protocol.JobQueued, last.Priority, last.Priority, last.Seq}
	}
	return store.Job{}, store.ErrNoJob
}
