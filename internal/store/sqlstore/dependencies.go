package sqlstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/lifecycle"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// A job's dependencies are settled where the jobs they name end: the
// transaction that ends a job marks the dependencies on it met or unmet
// and moves each job that waited on them, so no end is ever missed, by a
// crash or by another replica, and nothing has to poll.

// resolveDependencies reads the state of each job j depends on, locked
// until the insert commits so that none can end unseen in between, and
// sets j's status: a queued job whose dependencies are all met stays
// queued, else it waits. A dependency that can never be met refuses the
// insert unless j holds on unmet dependencies.
func (s *Store) resolveDependencies(ctx context.Context, c conn, j *store.Job) error {
	if len(j.DependsOn) == 0 {
		return nil
	}
	// Locked in one order, so two inserts naming the same jobs cannot
	// deadlock.
	order := make([]int, len(j.DependsOn))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(j.DependsOn[a].JobID, j.DependsOn[b].JobID) })
	allMet := true
	for _, i := range order {
		d := &j.DependsOn[i]
		var st protocol.JobStatus
		err := c.queryRow(ctx, `SELECT status FROM jobs WHERE id = ?`+s.d.ForUpdate, d.JobID).Scan(&st)
		if err := noRows(err, "job", d.JobID); err != nil {
			return fmt.Errorf("depends_on[%d]: %w", i, err)
		}
		d.State, d.Status = lifecycle.DependencyState(d.When, st), st
		if d.State == lifecycle.DependencyPending {
			var waiting int
			if err := c.queryRow(ctx, `SELECT COUNT(*) FROM job_dependencies WHERE depends_on = ? AND state = ''`, d.JobID).Scan(&waiting); err != nil {
				return err
			}
			if waiting >= store.MaxDependents {
				return fmt.Errorf("depends_on[%d]: job %s already has %d jobs waiting for it: %w",
					i, d.JobID, waiting, store.ErrTooManyDependents)
			}
		}
		if d.State == lifecycle.DependencyUnmet && !j.HoldUnmet {
			return fmt.Errorf("depends_on[%d]: job %s already ended %s, so a dependency with \"when\": %q can never be met: %w",
				i, d.JobID, st, d.When, store.ErrDependencyUnmet)
		}
		allMet = allMet && d.State == lifecycle.DependencyMet
	}
	if j.Status == protocol.JobQueued && !allMet {
		j.Status = protocol.JobWaiting
	}
	return nil
}

// writeDependencies stores the dependencies resolveDependencies read, once
// j's row exists.
func (s *Store) writeDependencies(ctx context.Context, c conn, j store.Job) error {
	for i, d := range j.DependsOn {
		if _, err := c.exec(ctx, `INSERT INTO job_dependencies (job_id, position, depends_on, when_ended, hold_unmet, state)
			VALUES (?, ?, ?, ?, ?, ?)`, j.ID, i, d.JobID, d.When, j.HoldUnmet, d.State); err != nil {
			return err
		}
	}
	return nil
}

// Dependencies reads the jobs jobID waits for.
func (s *Store) Dependencies(ctx context.Context, jobID string) ([]lifecycle.Dependency, bool, error) {
	return s.dependencies(ctx, s.reader(), jobID)
}

func (s *Store) dependencies(ctx context.Context, c conn, jobID string) ([]lifecycle.Dependency, bool, error) {
	rows, err := c.query(ctx, `SELECT d.depends_on, d.when_ended, d.state, d.hold_unmet, COALESCE(j.status, '')
		FROM job_dependencies d LEFT JOIN jobs j ON j.id = d.depends_on
		WHERE d.job_id = ? ORDER BY d.position`, jobID)
	if err != nil {
		return nil, false, err
	}
	defer rows.Close()
	var out []lifecycle.Dependency
	hold := false
	for rows.Next() {
		var d lifecycle.Dependency
		if err := rows.Scan(&d.JobID, &d.When, &d.State, &hold, &d.Status); err != nil {
			return nil, false, err
		}
		out = append(out, d)
	}
	return out, hold, rows.Err()
}

// settleDependents marks the pending dependencies on ended, which has just
// reached a terminal state, met or unmet, and moves the jobs that waited on
// them: to the queue when that was their last one, to cancelled when it
// can never be met (which settles their own dependents in turn). The moves
// go into f.
func (s *Store) settleDependents(ctx context.Context, c conn, ended store.Job, f *followUps) error {
	// One statement marks them all: the conditions the end meets, as the
	// lifecycle says, are met, every other one unmet.
	var met []any
	for _, w := range lifecycle.Whens {
		if lifecycle.DependencyState(w, ended.Status) == lifecycle.DependencyMet {
			met = append(met, w)
		}
	}
	rows, err := c.query(ctx, `UPDATE job_dependencies SET state = CASE WHEN when_ended IN (`+placeholders(len(met))+`)
		THEN ? ELSE ? END WHERE depends_on = ? AND state = '' RETURNING job_id`,
		append(met, lifecycle.DependencyMet, lifecycle.DependencyUnmet, ended.ID)...)
	if err != nil {
		return err
	}
	var waiting []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return err
		}
		waiting = append(waiting, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	// In one order, so that two ends settling the same jobs cannot
	// deadlock.
	slices.Sort(waiting)
	for _, id := range waiting {
		if _, err := s.settleWaiting(ctx, c, id, ended.UpdatedAt, f); err != nil {
			return err
		}
	}
	return nil
}

// settleWaiting moves the waiting job id if its dependencies now say so,
// adding the move to f, and returns the job as moved (nil when it stays).
func (s *Store) settleWaiting(ctx context.Context, c conn, id string, at time.Time, f *followUps) (*store.Job, error) {
	j, err := s.getJob(ctx, c, id, true)
	if errors.Is(err, store.ErrNotFound) || (err == nil && j.Status != protocol.JobWaiting) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	deps, hold, err := s.dependencies(ctx, c, id)
	if err != nil || len(deps) == 0 {
		return nil, err
	}
	step, ok := lifecycle.OnDependencies(j.Facts(), deps, hold)
	if !ok {
		return nil, nil
	}
	reason := *step.Error
	if reason == "" {
		reason = "every dependency met"
	}
	rec := audit.New("system", "", "job.transition", "job", id, audit.Success,
		map[string]any{"from": j.Status, "to": step.To, "attempt": j.Attempt, "cause": step.By, "reason": reason})
	t := store.JobTransition{JobID: id, ExpectAttempt: j.Attempt, From: j.Status, Step: step, Now: at, Audit: &rec}
	f.moves = append(f.moves, statusMove{j.Status, step.To})
	f.audits = append(f.audits, &rec)
	moved, err := s.moveIn(ctx, c, j, t, func(before, after store.Job) (bool, error) {
		return s.emitJob(ctx, c, before, after, &t)
	}, f)
	return &moved, err
}
