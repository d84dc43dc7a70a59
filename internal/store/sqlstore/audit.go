package sqlstore

import (
	"context"
	"encoding/json"
	"slices"
	"strings"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// appendAudit appends rec (nil: nothing) to the chain; see appendAudits.
func (s *Store) appendAudit(ctx context.Context, c conn, rec *audit.Record) error {
	if rec == nil {
		return nil
	}
	return s.appendAudits(ctx, c, []*audit.Record{rec})
}

// appendAudits seals recs, in order, as the successors of the chain head and
// inserts them: one read and one update of the head however many records, and
// one insert per auditRows of them. The head row is locked for the rest of the
// transaction, so concurrent appends queue up and the chain stays linear.
// Callers append last, after their other row locks, so the head is always the
// last lock taken.
func (s *Store) appendAudits(ctx context.Context, c conn, recs []*audit.Record) error {
	if len(recs) == 0 {
		return nil
	}
	var seq int64
	var hash string
	if err := c.queryRow(ctx, `SELECT seq, hash FROM audit_head WHERE id = 1`+s.d.ForUpdate).Scan(&seq, &hash); err != nil {
		return err
	}
	for rows := range slices.Chunk(recs, auditRows) {
		values, args := "", make([]any, 0, 11*len(rows))
		for i, rec := range rows {
			// Seal what will be stored: the hash covers the time at stored precision.
			rec.Time = now(rec.Time)
			if len(rec.Details) == 0 {
				rec.Details = json.RawMessage(`{}`)
			}
			audit.Seal(rec, seq, hash)
			seq, hash = rec.Seq, rec.Hash
			if i > 0 {
				values += ", "
			}
			values += "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
			args = append(args, rec.Seq, s.tv(rec.Time), rec.Actor, rec.ActorIP, rec.Action, rec.TargetType, rec.TargetID,
				rec.Outcome, string(rec.Details), rec.PrevHash, rec.Hash)
		}
		if _, err := c.exec(ctx, `INSERT INTO audit (seq, time, actor, actor_ip, action, target_type, target_id,
			outcome, details, prev_hash, hash) VALUES `+values, args...); err != nil {
			return err
		}
	}
	_, err := c.exec(ctx, `UPDATE audit_head SET seq = ?, hash = ? WHERE id = 1`, seq, hash)
	return err
}

// auditRows bounds the rows of one audit insert, and so the number of
// statement texts prepared for it.
const auditRows = 16

// AppendAudit appends one record on its own.
func (s *Store) AppendAudit(ctx context.Context, rec audit.Record) error {
	return s.write(ctx, func(c conn) error { return s.appendAudit(ctx, c, &rec) })
}

const auditCols = `seq, time, actor, actor_ip, action, target_type, target_id, outcome, details, prev_hash, hash`

// ListAudit returns up to limit records after sinceSeq, oldest first.
func (s *Store) ListAudit(ctx context.Context, sinceSeq int64, limit int) ([]audit.Record, error) {
	return s.queryAudit(ctx, `SELECT `+auditCols+` FROM audit WHERE seq > ? ORDER BY seq LIMIT ?`, sinceSeq, limitArg(limit))
}

// ListAuditNewest returns matching records newest first. Walking back from
// the newest along the primary key costs a page when filters match often.
func (s *Store) ListAuditNewest(ctx context.Context, f store.AuditFilter) ([]audit.Record, error) {
	where, args := " WHERE 1 = 1", []any{}
	if f.BeforeSeq > 0 {
		where += " AND seq < ?"
		args = append(args, f.BeforeSeq)
	}
	if f.Actor != "" {
		where += " AND actor = ?"
		args = append(args, f.Actor)
	}
	if f.Action != "" {
		if strings.HasSuffix(f.Action, ".") {
			// substr, not LIKE: action names hold "_", a LIKE wildcard.
			where += " AND substr(action, 1, ?) = ?"
			args = append(args, len(f.Action), f.Action)
		} else {
			where += " AND action = ?"
			args = append(args, f.Action)
		}
	}
	if f.TargetID != "" {
		where += " AND target_id = ?"
		args = append(args, f.TargetID)
	}
	return s.queryAudit(ctx, `SELECT `+auditCols+` FROM audit`+where+` ORDER BY seq DESC LIMIT ?`, append(args, limitArg(f.Limit))...)
}

func (s *Store) queryAudit(ctx context.Context, q string, args ...any) ([]audit.Record, error) {
	rows, err := s.reader().query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []audit.Record
	for rows.Next() {
		r, err := scanAudit(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

func scanAudit(r scanner) (audit.Record, error) {
	var rec audit.Record
	err := r.Scan(&rec.Seq, timeCol{&rec.Time}, &rec.Actor, &rec.ActorIP, &rec.Action, &rec.TargetType,
		&rec.TargetID, &rec.Outcome, rawCol{&rec.Details}, &rec.PrevHash, &rec.Hash)
	return rec, err
}
