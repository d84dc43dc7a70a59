package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/lifecycle"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// ClaimJob gives queued job req.JobID to a worker with room for it: ClaimJobs
// with one claim.
func (s *Store) ClaimJob(ctx context.Context, req store.ClaimRequest) (store.Job, store.Attempt, error) {
	res, err := s.ClaimJobs(ctx, []store.ClaimRequest{req})
	if err != nil {
		return store.Job{}, store.Attempt{}, err
	}
	return res[0].Job, res[0].Attempt, res[0].Err
}

// ClaimJobs makes a scheduler pass's claims in one transaction: one turn at
// SQLite's single writer instead of one per claim, and on PostgreSQL one
// transaction holding the job counts and the audit chain's head, updated once
// for all the claims.
func (s *Store) ClaimJobs(ctx context.Context, reqs []store.ClaimRequest) ([]store.ClaimResult, error) {
	for i, req := range reqs {
		if req.JobID == "" {
			return nil, fmt.Errorf("claim %d names no job: a claim names the job placement chose", i)
		}
	}
	var out []store.ClaimResult
	var emitted bool
	err := s.write(ctx, func(c conn) error {
		var err error
		out, emitted, err = s.claimInTx(ctx, c, reqs)
		return err
	})
	s.committed(emitted, err)
	return out, err
}

// claimInTx makes the claims inside transaction c. The attempts' GPUs are
// leased there too; a GPU another attempt holds refuses the claim with
// ErrConflict, so two claimers (two replicas on one database) can never hand
// out one GPU twice.
//
// Lock order: the workers first, in ID order; then the queued jobs with SKIP
// LOCKED, so a claimer never waits on job rows another transaction holds;
// the job counts and the audit chain's head last. TransitionJob takes a job,
// then its worker, then the counts and the head, so no lock cycle can form.
//
// Each claim is checked before it writes anything: a refused claim leaves no
// trace and the others go on.
func (s *Store) claimInTx(ctx context.Context, c conn, reqs []store.ClaimRequest) ([]store.ClaimResult, bool, error) {
	workers, err := s.lockWorkers(ctx, c, reqs)
	if err != nil {
		return nil, false, err
	}
	emitted := false
	out := make([]store.ClaimResult, len(reqs))
	var claimed []string // workers that took a job, in the order of their first claim
	var audits []*audit.Record
	var moved int64
	for i, req := range reqs {
		w, ok := workers[req.WorkerID]
		if !ok {
			out[i].Err = fmt.Errorf("worker %q: %w: %w", req.WorkerID, store.ErrNotFound, store.ErrConflict)
			continue
		}
		j, err := s.checkClaim(ctx, c, w, req)
		if err != nil {
			if isRefusal(err) {
				out[i].Err = err
				continue
			}
			return nil, false, err
		}
		at := now(req.Now)
		before := j
		j.Attempt++
		if err := s.writeClaim(ctx, c, w, j, req, at); err != nil {
			return nil, false, err
		}
		moved++
		if !slices.Contains(claimed, w.ID) {
			claimed = append(claimed, w.ID)
		}
		w.Running, w.GPUsUsed, w.CurrentJobID, w.WholeWorkerHeld = w.Running+1, w.GPUsUsed+len(req.GPUs), j.ID, req.WholeWorker
		// The job as written, without reading it back.
		job := j
		job.Status, job.WorkerID, job.AckDeadline, job.UpdatedAt = protocol.JobDispatched, w.ID, normTimePtr(&req.AckDeadline), at
		job.Error, job.StartedAt, job.CancelDeadline = "", nil, nil
		out[i].Job = job
		out[i].Attempt = store.Attempt{JobID: j.ID, Number: j.Attempt, WorkerID: w.ID,
			UploadTokenHash: req.UploadTokenHash, DispatchedAt: at, GPUs: req.GPUs}
		if req.Audit != nil {
			audits = append(audits, req.Audit)
		}
		t := store.JobTransition{JobID: j.ID, ExpectAttempt: before.Attempt, From: before.Status,
			Step: lifecycle.Step{To: protocol.JobDispatched, By: lifecycle.Claim}, Now: at, Audit: req.Audit}
		wrote, err := s.emitJob(ctx, c, before, job, &t)
		if err != nil {
			return nil, false, err
		}
		emitted = emitted || wrote
	}
	if moved == 0 {
		return out, false, nil
	}
	for _, id := range claimed {
		w := workers[id]
		if _, err := c.exec(ctx, `UPDATE workers SET status = ?, current_job_id = ?, running = ?, gpus_used = ?, held_whole = ? WHERE id = ?`,
			lifecycle.Settle(w.Status, w.Capacity().Load()), w.CurrentJobID, w.Running, w.GPUsUsed, w.WholeWorkerHeld, w.ID); err != nil {
			return nil, false, err
		}
	}
	// The counts, like the audit head, are locked last: see counts.go.
	if err := s.countAdd(ctx, c, map[protocol.JobStatus]int64{protocol.JobQueued: -moved, protocol.JobDispatched: moved}); err != nil {
		return nil, false, err
	}
	return out, emitted, s.appendAudits(ctx, c, audits)
}

// lockWorkers locks and reads the workers the claims name, in ID order. A
// worker that does not exist is left out.
func (s *Store) lockWorkers(ctx context.Context, c conn, reqs []store.ClaimRequest) (map[string]*store.Worker, error) {
	ids := make([]string, 0, len(reqs))
	for _, req := range reqs {
		ids = append(ids, req.WorkerID)
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	workers := make(map[string]*store.Worker, len(ids))
	for _, id := range ids {
		w, err := s.workerLoad(ctx, c, id)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		workers[id] = &w
	}
	return workers, nil
}

// checkClaim finds and locks the job req claims for worker w and checks that
// the claim may go ahead, writing nothing. A refusal is ErrConflict, ErrNoJob
// or ErrIllegalMove.
func (s *Store) checkClaim(ctx context.Context, c conn, w *store.Worker, req store.ClaimRequest) (store.Job, error) {
	if !lifecycle.CanClaim(w.Status, w.Capacity().Load()) {
		return store.Job{}, fmt.Errorf("worker %s is %s running %d attempt(s): %w", w.ID, w.Status, w.Running, store.ErrConflict)
	}
	if req.WholeWorker && w.Running > 0 {
		return store.Job{}, fmt.Errorf("worker %s runs %d attempt(s) and the job takes it whole: %w", w.ID, w.Running, store.ErrConflict)
	}
	j, err := s.lockQueued(ctx, c, req.JobID)
	if err != nil {
		return store.Job{}, err
	}
	if _, err := lifecycle.Check(j.Status, lifecycle.Step{To: protocol.JobDispatched, By: lifecycle.Claim}); err != nil {
		return store.Job{}, fmt.Errorf("job %s: %w: %w", j.ID, store.ErrIllegalMove, err)
	}
	return j, s.checkGPUs(ctx, c, *w, req.GPUs)
}

func isRefusal(err error) bool {
	return errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNoJob) || errors.Is(err, store.ErrIllegalMove)
}

// writeClaim stores attempt j.Attempt of job j on worker w, with its GPU leases.
func (s *Store) writeClaim(ctx context.Context, c conn, w *store.Worker, j store.Job, req store.ClaimRequest, at time.Time) error {
	for _, g := range req.GPUs {
		if _, err := c.exec(ctx, `INSERT INTO gpu_leases (worker_id, gpu_index, job_id, attempt) VALUES (?, ?, ?, ?)`,
			w.ID, g, j.ID, j.Attempt); err != nil {
			if s.d.IsUnique(err) { // checked under the worker's lock: not expected
				return fmt.Errorf("GPU %d of worker %s was taken meanwhile: %w", g, w.ID, store.ErrConflict)
			}
			return err
		}
	}
	if _, err := c.exec(ctx, `UPDATE jobs SET status = ?, attempt = ?, worker_id = ?, ack_deadline = ?,
		error = '', started_at = NULL, cancel_deadline = NULL, updated_at = ? WHERE id = ?`,
		protocol.JobDispatched, j.Attempt, w.ID, s.tv(req.AckDeadline), s.tv(at), j.ID); err != nil {
		return err
	}
	_, err := c.exec(ctx, `INSERT INTO attempts (job_id, number, worker_id, upload_token_hash,
		dispatched_at, gpus) VALUES (?, ?, ?, ?, ?, ?)`, j.ID, j.Attempt, w.ID, req.UploadTokenHash, s.tv(at),
		indicesArg(req.GPUs))
	return err
}

// checkGPUs refuses (ErrConflict) GPUs beyond the worker's, named twice,
// kept out of use by the worker, or held by an attempt. Leases and the
// worker's GPU conditions are written under the worker's lock only, so what
// this reads stays true until the claim's transaction ends.
func (s *Store) checkGPUs(ctx context.Context, c conn, w store.Worker, gpus []int) error {
	count := w.GPUInfo.Count
	unavailable := w.Capacity().UnavailableGPUs()
	for i, g := range gpus {
		if g < 0 || g >= count {
			return fmt.Errorf("worker %s has %d GPUs, not GPU %d: %w", w.ID, count, g, store.ErrConflict)
		}
		if slices.Contains(gpus[:i], g) {
			return fmt.Errorf("GPU %d of worker %s is named twice: %w", g, w.ID, store.ErrConflict)
		}
		if unavailable[g] {
			return fmt.Errorf("GPU %d of worker %s is kept out of use: %w", g, w.ID, store.ErrConflict)
		}
		var holder string
		err := c.queryRow(ctx, `SELECT job_id FROM gpu_leases WHERE worker_id = ? AND gpu_index = ?`, w.ID, g).Scan(&holder)
		switch {
		case err == nil:
			return fmt.Errorf("GPU %d of worker %s is held by job %s: %w", g, w.ID, holder, store.ErrConflict)
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
	}
	return nil
}

// ListQueued returns up to limit queued jobs in claim order, behind after
// when it is set, with the columns placement reads.
func (s *Store) ListQueued(ctx context.Context, after *store.QueuedJob, limit int) ([]store.QueuedJob, error) {
	return s.listQueued(ctx, "", []any{protocol.JobQueued}, after, limit)
}

// ListQueuedOfTeam is ListQueued for one team's jobs (jobs_team_queue).
func (s *Store) ListQueuedOfTeam(ctx context.Context, team string, after *store.QueuedJob, limit int) ([]store.QueuedJob, error) {
	return s.listQueued(ctx, " AND team = ?", []any{protocol.JobQueued, team}, after, limit)
}

func (s *Store) listQueued(ctx context.Context, where string, args []any, after *store.QueuedJob, limit int) ([]store.QueuedJob, error) {
	if after != nil {
		where += ` AND (priority < ? OR (priority = ? AND seq > ?))`
		args = append(args, after.Priority, after.Priority, after.Seq)
	}
	rows, err := s.reader().query(ctx, `SELECT id, seq, priority, team, target, worker_labels, gpu_count, whole_worker, min_vram_gb
		FROM jobs WHERE status = ?`+where+` ORDER BY priority DESC, seq ASC LIMIT ?`, append(args, limitArg(limit))...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.QueuedJob
	for rows.Next() {
		var j store.QueuedJob
		if err := rows.Scan(&j.ID, &j.Seq, &j.Priority, &j.Team, &j.Target, jsonCol{&j.WorkerLabels}, &j.GPUCount, &j.WholeWorker, &j.MinVRAMGB); err != nil {
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

// QueuedGPUDemand sums the GPU counts of the queued jobs and counts those
// that take a whole worker, over the queued part of jobs_by_status.
func (s *Store) QueuedGPUDemand(ctx context.Context) (gpus, whole int, err error) {
	err = s.reader().queryRow(ctx, `SELECT COALESCE(SUM(gpu_count), 0), COUNT(*) FILTER (WHERE whole_worker)
		FROM jobs WHERE status = ?`, protocol.JobQueued).Scan(&gpus, &whole)
	return gpus, whole, err
}
