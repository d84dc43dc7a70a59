package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/lifecycle"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

const requestCols = `r.id, r.job_id, r.team, r.rule_id, r.rule_name, r.reason, r.gpu_hours, r.requested_by, r.approver,
	r.status, r.reviewed_by, r.reviewed_at, r.review_notes, r.created_at, COALESCE(j.config_name, ''), COALESCE(j.status, '')`

// requestFrom joins each request with its job (gone once retention
// deleted it) for its config name and status.
const requestFrom = ` FROM approval_requests r LEFT JOIN jobs j ON j.id = r.job_id`

func scanRequest(r scanner) (store.ApprovalRequest, error) {
	var q store.ApprovalRequest
	var hours sql.NullFloat64
	err := r.Scan(&q.ID, &q.JobID, &q.Team, &q.RuleID, &q.RuleName, &q.Reason, &hours, &q.RequestedBy, &q.Approver,
		&q.Status, &q.ReviewedBy, nullTimeCol{&q.ReviewedAt}, &q.ReviewNotes, timeCol{&q.CreatedAt}, &q.ConfigName, &q.JobStatus)
	if hours.Valid {
		q.GPUHours = &hours.Float64
	}
	return q, err
}

// countSubmit bumps actor's count of jobs submitted on the job's day.
func (s *Store) countSubmit(ctx context.Context, c conn, j store.Job) error {
	if j.SubmittedBy == "" {
		return nil
	}
	_, err := c.exec(ctx, `INSERT INTO submit_counts (actor, day, n) VALUES (?, ?, 1)
		ON CONFLICT (actor, day) DO UPDATE SET n = submit_counts.n + 1`, j.SubmittedBy, j.CreatedAt.UTC().Format(time.DateOnly))
	return err
}

// SubmitCounts reads actor's jobs submitted in all and on day.
func (s *Store) SubmitCounts(ctx context.Context, actor, day string) (ever, onDay int, err error) {
	err = s.reader().queryRow(ctx, `SELECT COALESCE(SUM(n), 0), COALESCE(SUM(CASE WHEN day = ? THEN n ELSE 0 END), 0)
		FROM submit_counts WHERE actor = ?`, day, actor).Scan(&ever, &onDay)
	return ever, onDay, err
}

// InsertHeldJob stores a job held for approval and its request.
func (s *Store) InsertHeldJob(ctx context.Context, j store.Job, r store.ApprovalRequest, rec *audit.Record) (store.Job, store.ApprovalRequest, error) {
	j.Status = protocol.JobPendingApproval
	j = prepareJob(j)
	r.JobID, r.Team, r.Status = j.ID, j.Team, store.ApprovalPending
	r.RequestedBy, r.CreatedAt = j.SubmittedBy, normTime(j.CreatedAt)
	r.ConfigName, r.JobStatus = j.ConfigName, string(j.Status)
	if r.Approver == "" {
		r.Approver = "lead"
	}
	var emitted bool
	err := s.write(ctx, func(c conn) error {
		if err := s.resolveDependencies(ctx, c, &j); err != nil {
			return err
		}
		if err := s.insertJobRow(ctx, c, &j); err != nil {
			return err
		}
		if err := s.writeDependencies(ctx, c, j); err != nil {
			return err
		}
		if err := c.queryRow(ctx, `INSERT INTO approval_requests (job_id, team, rule_id, rule_name, reason, gpu_hours,
			requested_by, approver, status, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`,
			r.JobID, r.Team, r.RuleID, r.RuleName, r.Reason, nullFloat(r.GPUHours), r.RequestedBy, r.Approver,
			r.Status, s.tv(r.CreatedAt)).Scan(&r.ID); err != nil {
			return err
		}
		var err error
		if emitted, err = s.emitHeld(ctx, c, j, r); err != nil {
			return err
		}
		return s.countNewJob(ctx, c, j, rec)
	})
	s.committed(emitted, err)
	if err != nil {
		return store.Job{}, store.ApprovalRequest{}, err
	}
	return asRead(j), r, nil
}

func nullFloat(f *float64) any {
	if f == nil {
		return nil
	}
	return *f
}

// emitHeld makes a held job's events: the approval request's, when the
// outbox makes those, else a plain submit's.
func (s *Store) emitHeld(ctx context.Context, c conn, j store.Job, r store.ApprovalRequest) (bool, error) {
	o, err := s.outboxFor(ctx, c)
	if o == nil || err != nil {
		return false, err
	}
	if ao, ok := o.(store.ApprovalOutbox); ok {
		return s.emit(ctx, c, ao.JobHeld(j, r))
	}
	return s.emit(ctx, c, o.JobInserted(j))
}

// DecideApproval approves or rejects a pending request and moves its job.
func (s *Store) DecideApproval(ctx context.Context, d store.ApprovalDecision) (store.Job, store.ApprovalRequest, error) {
	if !d.Approve && strings.TrimSpace(d.Reason) == "" {
		return store.Job{}, store.ApprovalRequest{}, errors.New("store: a rejection needs a reason")
	}
	at := now(d.At)
	var job store.Job
	var req store.ApprovalRequest
	var emitted bool
	err := s.write(ctx, func(c conn) error {
		r, err := scanRequest(c.queryRow(ctx, `SELECT `+requestCols+requestFrom+` WHERE r.id = ?`, d.RequestID))
		if err != nil {
			return noRows(err, "approval request", strconv.FormatInt(d.RequestID, 10))
		}
		if r.Status != store.ApprovalPending {
			return fmt.Errorf("approval request %d is %s: %w", r.ID, r.Status, store.ErrConflict)
		}
		j, err := s.getJob(ctx, c, r.JobID, true)
		if err != nil {
			return err
		}
		deps, _, err := s.dependencies(ctx, c, j.ID)
		if err != nil {
			return err
		}
		step, err := decisionStep(j, d, len(deps) > 0)
		if err != nil {
			return err
		}
		r.Status, r.ReviewedBy, r.ReviewedAt = store.ApprovalApproved, d.By, normTimePtr(&at)
		r.ReviewNotes = d.Notes
		if !d.Approve {
			r.Status, r.ReviewNotes = store.ApprovalRejected, d.Reason
		}
		n, err := rowsAffected(c.exec(ctx, `UPDATE approval_requests SET status = ?, reviewed_by = ?, reviewed_at = ?,
			review_notes = ? WHERE id = ? AND status = ?`, r.Status, r.ReviewedBy, s.tv(at), r.ReviewNotes, r.ID, store.ApprovalPending))
		if err != nil {
			return err
		}
		if n != 1 {
			return fmt.Errorf("approval request %d is no longer pending: %w", r.ID, store.ErrConflict)
		}
		t := store.JobTransition{JobID: j.ID, ExpectAttempt: j.Attempt, From: j.Status, Step: step, Now: at, Audit: d.Audit}
		job, emitted, err = s.transitionIn(ctx, c, j, t, func(before, after store.Job) (bool, error) {
			return s.emitDecided(ctx, c, before, after, r, &t)
		})
		r.JobStatus = string(job.Status)
		req = r
		return err
	})
	s.committed(emitted, err)
	if err != nil {
		return store.Job{}, store.ApprovalRequest{}, err
	}
	return job, req, nil
}

// decisionStep is the lifecycle's move for a decision on j.
func decisionStep(j store.Job, d store.ApprovalDecision, dependsOnJobs bool) (lifecycle.Step, error) {
	var step lifecycle.Step
	var err error
	if d.Approve {
		step, err = lifecycle.OnApprove(j.Facts(), dependsOnJobs)
	} else {
		step, err = lifecycle.OnReject(j.Facts(), d.By, d.Reason)
	}
	if err != nil {
		return step, fmt.Errorf("%w: %w", store.ErrConflict, err)
	}
	return step, nil
}

func (s *Store) emitDecided(ctx context.Context, c conn, before, after store.Job, r store.ApprovalRequest, t *store.JobTransition) (bool, error) {
	o, err := s.outboxFor(ctx, c)
	if o == nil || err != nil {
		return false, err
	}
	if ao, ok := o.(store.ApprovalOutbox); ok {
		return s.emit(ctx, c, ao.ApprovalDecided(before, after, r))
	}
	return s.emit(ctx, c, o.JobMoved(before, after, t))
}

// cancelApprovalRequest marks a held job's pending request cancelled, as
// its job is cancelled in the same transaction.
func (s *Store) cancelApprovalRequest(ctx context.Context, c conn, jobID string, rec *audit.Record, at time.Time) error {
	by := ""
	if rec != nil {
		by = rec.Actor
	}
	_, err := c.exec(ctx, `UPDATE approval_requests SET status = ?, reviewed_by = ?, reviewed_at = ? WHERE job_id = ? AND status = ?`,
		store.ApprovalCancelled, by, s.tv(at), jobID, store.ApprovalPending)
	return err
}

// GetApprovalRequest reads one request.
func (s *Store) GetApprovalRequest(ctx context.Context, id int64) (store.ApprovalRequest, error) {
	r, err := scanRequest(s.reader().queryRow(ctx, `SELECT `+requestCols+requestFrom+` WHERE r.id = ?`, id))
	return r, noRows(err, "approval request", strconv.FormatInt(id, 10))
}

// GetApprovalRequestByJob reads a job's request.
func (s *Store) GetApprovalRequestByJob(ctx context.Context, jobID string) (store.ApprovalRequest, error) {
	r, err := scanRequest(s.reader().queryRow(ctx, `SELECT `+requestCols+requestFrom+` WHERE r.job_id = ?`, jobID))
	return r, noRows(err, "approval request of job", jobID)
}

// approvalWhere is the WHERE clause of a filter.
func approvalWhere(teams []string, status string) (string, []any) {
	var conds []string
	var args []any
	if teams != nil {
		if len(teams) == 0 {
			return " WHERE 1 = 0", nil
		}
		conds = append(conds, "r.team IN ("+placeholders(len(teams))+")")
		for _, t := range teams {
			args = append(args, t)
		}
	}
	if status != "" {
		conds = append(conds, "r.status = ?")
		args = append(args, status)
	}
	if len(conds) == 0 {
		return "", nil
	}
	return " WHERE " + strings.Join(conds, " AND "), args
}

// ListApprovalRequests returns a page of requests, newest first.
func (s *Store) ListApprovalRequests(ctx context.Context, f store.ApprovalFilter) ([]store.ApprovalRequest, int, error) {
	where, args := approvalWhere(f.Teams, f.Status)
	var total int
	if err := s.reader().queryRow(ctx, `SELECT COUNT(*) FROM approval_requests r`+where, args...).Scan(&total); err != nil {
		return nil, 0, err
	}
	rows, err := s.reader().query(ctx, `SELECT `+requestCols+requestFrom+where+` ORDER BY r.id DESC LIMIT ? OFFSET ?`,
		append(args, limitArg(f.Limit), f.Offset)...)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	var out []store.ApprovalRequest
	for rows.Next() {
		r, err := scanRequest(rows)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, r)
	}
	return out, total, rows.Err()
}

// CountPendingApprovals counts pending requests of teams (nil: every team).
func (s *Store) CountPendingApprovals(ctx context.Context, teams []string) (int, error) {
	where, args := approvalWhere(teams, store.ApprovalPending)
	var n int
	err := s.reader().queryRow(ctx, `SELECT COUNT(*) FROM approval_requests r`+where, args...).Scan(&n)
	return n, err
}

const ruleCols = `id, position, name, conditions, approver, source, created_at, created_by`

func scanRule(r scanner) (store.ApprovalRule, error) {
	var a store.ApprovalRule
	err := r.Scan(&a.ID, &a.Position, &a.Name, rawCol{&a.Conditions}, &a.Approver, &a.Source, timeCol{&a.CreatedAt}, &a.CreatedBy)
	return a, err
}

// ruleOrder is the order the rules are checked in.
const ruleOrder = ` ORDER BY position, id`

func (s *Store) listRules(ctx context.Context, c conn, where string, args ...any) ([]store.ApprovalRule, error) {
	rows, err := c.query(ctx, `SELECT `+ruleCols+` FROM approval_rules`+where+ruleOrder, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.ApprovalRule
	for rows.Next() {
		r, err := scanRule(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// ListApprovalRules lists every rule in the order they are checked.
func (s *Store) ListApprovalRules(ctx context.Context) ([]store.ApprovalRule, error) {
	return s.listRules(ctx, s.reader(), "")
}

// GetApprovalRule reads a rule by ID or, failing that, by name.
func (s *Store) GetApprovalRule(ctx context.Context, idOrName string) (store.ApprovalRule, error) {
	r, err := scanRule(s.reader().queryRow(ctx, `SELECT `+ruleCols+` FROM approval_rules WHERE id = ?`, idOrName))
	if errors.Is(err, sql.ErrNoRows) {
		r, err = scanRule(s.reader().queryRow(ctx, `SELECT `+ruleCols+` FROM approval_rules WHERE name = ?`, idOrName))
	}
	return r, noRows(err, "approval rule", idOrName)
}

// NewRuleID returns "ar_" and 12 random base32 characters.
func NewRuleID() string { return "ar_" + strings.TrimPrefix(protocol.NewJobID(), "j_") }

func (s *Store) insertRule(ctx context.Context, c conn, r store.ApprovalRule) error {
	_, err := c.exec(ctx, `INSERT INTO approval_rules (`+ruleCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		r.ID, r.Position, r.Name, rawArg(r.Conditions, "{}"), r.Approver, r.Source, s.tv(r.CreatedAt), r.CreatedBy)
	return err
}

// CreateApprovalRule stores an API rule last in the order.
func (s *Store) CreateApprovalRule(ctx context.Context, r store.ApprovalRule, rec *audit.Record) (store.ApprovalRule, error) {
	if r.ID == "" {
		r.ID = NewRuleID()
	}
	r.Source, r.CreatedAt = store.RuleFromAPI, normTime(now(r.CreatedAt))
	r.Conditions = storedRaw(r.Conditions)
	if r.Approver == "" {
		r.Approver = "lead"
	}
	var out store.ApprovalRule
	err := s.write(ctx, func(c conn) error {
		if err := c.queryRow(ctx, `SELECT COALESCE(MAX(position), 0) + 1 FROM approval_rules WHERE source = ?`,
			store.RuleFromAPI).Scan(&r.Position); err != nil {
			return err
		}
		if err := s.insertRule(ctx, c, r); err != nil {
			return err
		}
		var err error
		if out, err = scanRule(c.queryRow(ctx, `SELECT `+ruleCols+` FROM approval_rules WHERE id = ?`, r.ID)); err != nil {
			return err
		}
		return s.appendAudit(ctx, c, rec)
	})
	if err != nil {
		return store.ApprovalRule{}, err
	}
	return out, nil
}

// UpdateApprovalRule changes an API rule through fn.
func (s *Store) UpdateApprovalRule(ctx context.Context, id string, fn func(*store.ApprovalRule) (*audit.Record, error)) (store.ApprovalRule, error) {
	var out store.ApprovalRule
	err := s.write(ctx, func(c conn) error {
		r, err := scanRule(c.queryRow(ctx, `SELECT `+ruleCols+` FROM approval_rules WHERE id = ?`+s.d.ForUpdate, id))
		if err != nil {
			return noRows(err, "approval rule", id)
		}
		rec, err := fn(&r)
		if err != nil {
			return err
		}
		r.Conditions = storedRaw(r.Conditions)
		if _, err := c.exec(ctx, `UPDATE approval_rules SET position = ?, name = ?, conditions = ?, approver = ? WHERE id = ?`,
			r.Position, r.Name, rawArg(r.Conditions, "{}"), r.Approver, r.ID); err != nil {
			return err
		}
		// Read back: the engine keeps the conditions in its own spelling.
		if out, err = scanRule(c.queryRow(ctx, `SELECT `+ruleCols+` FROM approval_rules WHERE id = ?`, id)); err != nil {
			return err
		}
		return s.appendAudit(ctx, c, rec)
	})
	return out, err
}

// DeleteApprovalRule deletes a rule; requests it made keep its name.
func (s *Store) DeleteApprovalRule(ctx context.Context, id string, rec *audit.Record) error {
	return s.write(ctx, func(c conn) error {
		n, err := rowsAffected(c.exec(ctx, `DELETE FROM approval_rules WHERE id = ?`, id))
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("approval rule %s: %w", id, store.ErrNotFound)
		}
		return s.appendAudit(ctx, c, rec)
	})
}
