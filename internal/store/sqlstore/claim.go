package sqlstore

import (
	"context"
	"fmt"

	"github.com/simpletuner/simpletuner-orchestration/internal/lifecycle"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// ClaimJob gives the best queued job that req.Match accepts to an idle worker.
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
		w, err := s.getWorker(ctx, c, req.WorkerID, true)
		if err != nil {
			return fmt.Errorf("%w: %w", store.ErrConflict, err)
		}
		running := 0
		if w.CurrentJobID != "" {
			running = 1
		}
		if !lifecycle.CanClaim(w.Status, running, 1) {
			return fmt.Errorf("worker %s is %s with job %q: %w", w.ID, w.Status, w.CurrentJobID, store.ErrConflict)
		}
		j, err := s.pickQueued(ctx, c, req.Match)
		if err != nil {
			return err
		}
		if _, err := lifecycle.Check(j.Status, lifecycle.Step{To: protocol.JobDispatched, By: lifecycle.Claim}); err != nil {
			return fmt.Errorf("job %s: %w: %w", j.ID, store.ErrIllegalMove, err)
		}
		j.Attempt++
		if _, err := c.exec(ctx, `UPDATE jobs SET status = ?, attempt = ?, worker_id = ?, ack_deadline = ?,
			error = '', started_at = NULL, cancel_deadline = NULL, updated_at = ? WHERE id = ?`,
			protocol.JobDispatched, j.Attempt, w.ID, s.tv(req.AckDeadline), s.tv(at), j.ID); err != nil {
			return err
		}
		if err := s.countMove(ctx, c, j.Status, protocol.JobDispatched); err != nil {
			return err
		}
		att = store.Attempt{JobID: j.ID, Number: j.Attempt, WorkerID: w.ID,
			UploadTokenHash: req.UploadTokenHash, DispatchedAt: at}
		if _, err := c.exec(ctx, `INSERT INTO attempts (job_id, number, worker_id, upload_token_hash,
			dispatched_at) VALUES (?, ?, ?, ?, ?)`, j.ID, j.Attempt, w.ID, req.UploadTokenHash, s.tv(at)); err != nil {
			return err
		}
		if _, err := c.exec(ctx, `UPDATE workers SET status = ?, current_job_id = ? WHERE id = ?`,
			lifecycle.Settle(w.Status, running+1, 1), j.ID, w.ID); err != nil {
			return err
		}
		if job, err = s.getJob(ctx, c, j.ID, false); err != nil {
			return err
		}
		return s.appendAudit(ctx, c, req.Audit)
	})
	return job, att, err
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
