package sqlstore

import (
	"context"
	"fmt"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/lifecycle"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// TransitionJob applies t if the job is still where the caller saw it.
func (s *Store) TransitionJob(ctx context.Context, t store.JobTransition) (store.Job, error) {
	var out store.Job
	var emitted bool
	err := s.write(ctx, func(c conn) error {
		j, err := s.getJob(ctx, c, t.JobID, true)
		if err != nil {
			return err
		}
		out, emitted, err = s.transitionIn(ctx, c, j, t, func(before, after store.Job) (bool, error) {
			return s.emitJob(ctx, c, before, after, &t)
		})
		return err
	})
	s.committed(emitted, err)
	return out, err
}

// transitionIn applies t to j, read locked in c's transaction; emit makes
// the move's events. The jobs that waited on j move with it when its move
// settles them, in the same transaction.
func (s *Store) transitionIn(ctx context.Context, c conn, j store.Job, t store.JobTransition,
	emit func(before, after store.Job) (bool, error)) (store.Job, bool, error) {
	var f followUps
	out, err := s.moveIn(ctx, c, j, t, emit, &f)
	if err != nil {
		return out, f.emitted, err
	}
	// The counts, like the audit head, are locked last (see counts.go), and
	// once for every move the transaction made, in their one order.
	deltas := map[protocol.JobStatus]int64{}
	countInto(deltas, j.Status, t.To)
	for _, m := range f.moves {
		countInto(deltas, m.from, m.to)
	}
	if err := s.countAdd(ctx, c, deltas); err != nil {
		return out, f.emitted, err
	}
	recs := f.audits
	if t.Audit != nil {
		recs = append([]*audit.Record{t.Audit}, recs...)
	}
	return out, f.emitted, s.appendAudits(ctx, c, recs)
}

// followUps are the moves a transition caused in other jobs (the jobs
// that waited on it), counted and audited with it.
type followUps struct {
	moves   []statusMove
	audits  []*audit.Record
	emitted bool
}

// statusMove is one job's move from a status to another, for the counts.
type statusMove struct{ from, to protocol.JobStatus }

// countInto adds a move from → to to deltas.
func countInto(deltas map[protocol.JobStatus]int64, from, to protocol.JobStatus) {
	if from != to {
		deltas[from]--
		deltas[to]++
	}
}

// moveIn is transitionIn without the counts and the audit: it changes the
// job's rows, makes its events and settles the jobs waiting on it, adding
// their moves to f.
func (s *Store) moveIn(ctx context.Context, c conn, j store.Job, t store.JobTransition,
	emit func(before, after store.Job) (bool, error), f *followUps) (out store.Job, err error) {
	at := now(t.Now)
	err = func() error {
		if err := checkTransition(j, t); err != nil {
			return err
		}
		attemptWorker := ""
		if t.ExpectWorker != "" || t.EndAttempt != "" || t.Ack {
			if attemptWorker, err = s.attemptWorker(ctx, c, j); err != nil {
				return err
			}
			if t.ExpectWorker != "" && attemptWorker != t.ExpectWorker {
				return fmt.Errorf("job %s attempt %d belongs to worker %q, not %q: %w",
					j.ID, j.Attempt, attemptWorker, t.ExpectWorker, store.ErrConflict)
			}
		}
		if err := checkMove(j, t); err != nil {
			return err
		}

		// The row is written and the job handed back from the same changes,
		// so the caller gets the stored job without reading it again.
		out = j
		out.Status, out.UpdatedAt = t.To, at
		set, args := "status = ?, updated_at = ?", []any{t.To, s.tv(at)}
		add := func(col string, v any) {
			set += ", " + col + " = ?"
			args = append(args, v)
		}
		switch {
		case t.To == protocol.JobQueued: // back in the queue: no worker, no lease, not being preempted
			add("worker_id", "")
			add("preempted_by", "")
			set += ", ack_deadline = NULL, started_at = NULL"
			out.WorkerID, out.AckDeadline, out.StartedAt, out.PreemptedBy = "", nil, nil, ""
		case t.To.Terminal():
			add("ended_at", s.tv(at))
			out.EndedAt = normTimePtr(&at)
		}
		if t.Ack && t.To != protocol.JobQueued {
			add("started_at", s.tv(at))
			out.StartedAt = normTimePtr(&at)
		}
		if t.SpendRetry {
			set += ", retries_used = retries_used + 1"
			out.RetriesUsed++
		}
		if t.Error != nil {
			add("error", *t.Error)
			out.Error = *t.Error
		}
		if t.Progress != nil {
			add("progress", rawArg(t.Progress, nil))
			out.Progress = storedRaw(t.Progress)
		}
		if t.PreemptedBy != nil && t.To != protocol.JobQueued {
			add("preempted_by", *t.PreemptedBy)
			out.PreemptedBy = *t.PreemptedBy
		}
		if t.CancelDeadline != nil {
			add("cancel_deadline", s.tv(*t.CancelDeadline))
			out.CancelDeadline = normTimePtr(t.CancelDeadline)
		}
		if _, err := c.exec(ctx, `UPDATE jobs SET `+set+` WHERE id = ?`, append(args, j.ID)...); err != nil {
			return err
		}

		if t.Ack {
			if _, err := c.exec(ctx, `UPDATE attempts SET acked_at = ? WHERE job_id = ? AND number = ?`,
				s.tv(at), j.ID, j.Attempt); err != nil {
				return err
			}
		}
		if t.EndAttempt != "" {
			errText := ""
			if t.Error != nil {
				errText = *t.Error
			}
			u := usageArgs(t.Usage)
			if _, err := c.exec(ctx, `UPDATE attempts SET ended_at = ?, outcome = ?, error = ?,
				cpu_seconds = ?, peak_memory_bytes = ?, gpu_seconds = ?, peak_gpu_memory_bytes = ?,
				gpu_utilization_pct = ?, gpu_events = ? WHERE job_id = ? AND number = ? AND ended_at IS NULL`,
				append(append([]any{s.tv(at), t.EndAttempt, errText}, u...), j.ID, j.Attempt)...); err != nil {
				return err
			}
			// The GPUs it held and its start (the job's started_at is its
			// current attempt's acknowledgement) make its team's usage
			// without another statement: reading them back (UPDATE …
			// RETURNING) was most of what teams added to a job's cost.
			freed, err := s.freeWorker(ctx, c, attemptWorker, j.ID, j.Attempt)
			if err != nil {
				return err
			}
			if err := s.addTeamUsage(ctx, c, j.Team, int(freed), j.StartedAt, at, t.Usage); err != nil {
				return err
			}
		}
		if j.Status == protocol.JobPendingApproval && t.By == lifecycle.Cancel {
			if err := s.cancelApprovalRequest(ctx, c, j.ID, t.Audit, at); err != nil {
				return err
			}
		}
		emitted, err := emit(j, out)
		if err != nil {
			return err
		}
		f.emitted = f.emitted || emitted
		switch {
		case t.To.Terminal():
			return s.settleDependents(ctx, c, out, f)
		case t.To == protocol.JobWaiting:
			// Approved after its dependencies ended: they may be met
			// already, and then the caller gets the job as it ends up.
			settled, err := s.settleWaiting(ctx, c, j.ID, at, f)
			if settled != nil {
				out = *settled
			}
			return err
		}
		return nil
	}()
	return out, err
}

// checkTransition is the compare half of the compare-and-set.
func checkTransition(j store.Job, t store.JobTransition) error {
	switch {
	case j.Status.Terminal():
		return fmt.Errorf("job %s is %s: %w", j.ID, j.Status, store.ErrConflict)
	case j.Status != t.From:
		return fmt.Errorf("job %s is %s, expected %s: %w", j.ID, j.Status, t.From, store.ErrConflict)
	case j.Attempt != t.ExpectAttempt:
		return fmt.Errorf("job %s is at attempt %d, expected %d: %w", j.ID, j.Attempt, t.ExpectAttempt, store.ErrConflict)
	case (t.ExpectWorker != "" || t.EndAttempt != "" || t.Ack) && j.Attempt == 0:
		return fmt.Errorf("job %s has no attempt yet: %w", j.ID, store.ErrConflict)
	}
	return nil
}

// checkMove is the lifecycle's verdict on the move, after the compare.
func checkMove(j store.Job, t store.JobTransition) error {
	if _, err := lifecycle.Check(j.Status, t.Step); err != nil {
		return fmt.Errorf("job %s: %w: %w", j.ID, store.ErrIllegalMove, err)
	}
	if t.By == lifecycle.Claim {
		return fmt.Errorf("job %s: %w: a claim goes through ClaimJob, which opens the attempt", j.ID, store.ErrIllegalMove)
	}
	return nil
}

// attemptWorker is the worker holding the job's current attempt. A claim
// writes it to the job row and the attempt row together, and only a move
// back to the queue clears the job's: while the job row names a worker, it
// is the attempt's, and the attempt row need not be read.
func (s *Store) attemptWorker(ctx context.Context, c conn, j store.Job) (string, error) {
	if j.WorkerID != "" {
		return j.WorkerID, nil
	}
	a, err := s.getAttempt(ctx, c, j.ID, j.Attempt)
	return a.WorkerID, err
}

func (s *Store) getAttempt(ctx context.Context, c conn, jobID string, number int) (store.Attempt, error) {
	a, err := scanAttempt(c.queryRow(ctx, `SELECT `+attemptCols+` FROM attempts WHERE job_id = ? AND number = ?`, jobID, number))
	return a, noRows(err, "attempt of job", fmt.Sprintf("%s#%d", jobID, number))
}

// usageArgs binds an attempt's usage columns (cpu_seconds,
// peak_memory_bytes, gpu_seconds, peak_gpu_memory_bytes,
// gpu_utilization_pct, gpu_events): all NULL when nothing was reported.
func usageArgs(u *protocol.Usage) []any {
	if u == nil {
		return []any{nil, nil, nil, nil, nil, nil}
	}
	var util, events any
	if u.GPUUtilizationPct != nil {
		util = *u.GPUUtilizationPct
	}
	if len(u.GPUEvents) > 0 {
		events = plainJSON(u.GPUEvents)
	}
	return []any{u.CPUSeconds, int64(min(u.PeakMemoryBytes, 1<<62)), u.GPUSeconds,
		int64(min(u.PeakGPUMemoryBytes, 1<<62)), util, events}
}
