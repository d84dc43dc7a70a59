package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// sessionCols joins each session to its admin token, so one read tells the
// dashboard both whether the session exists and whether its token still works.
const sessionCols = `s.id_hash, s.token_id, s.created_at, s.last_seen, s.peer_ip, s.user_agent,
	t.id, t.name, t.scopes, t.hash, t.created_at, t.revoked_at, t.team, t.max_priority, t.person_id, t.expires_at`

// CreateDashboardSession stores a new session for a live admin token.
func (s *Store) CreateDashboardSession(ctx context.Context, sess store.DashboardSession, rec *audit.Record) error {
	if sess.IDHash == "" || sess.TokenID == "" {
		return errors.New("store: a dashboard session needs an id hash and a token id")
	}
	created := now(sess.CreatedAt)
	seen := created
	if !sess.LastSeen.IsZero() {
		seen = normTime(sess.LastSeen)
	}
	return s.write(ctx, func(c conn) error {
		var revoked any
		err := c.queryRow(ctx, `SELECT revoked_at FROM admin_tokens WHERE id = ?`, sess.TokenID).Scan(&revoked)
		if err != nil {
			return noRows(err, "admin token", sess.TokenID)
		}
		if revoked != nil {
			return fmt.Errorf("admin token %q is revoked: %w", sess.TokenID, store.ErrNotFound)
		}
		if _, err := c.exec(ctx, `INSERT INTO dashboard_sessions (id_hash, token_id, created_at, last_seen, peer_ip, user_agent)
			VALUES (?, ?, ?, ?, ?, ?)`, sess.IDHash, sess.TokenID, s.tv(created), s.tv(seen), sess.PeerIP, sess.UserAgent); err != nil {
			return err
		}
		return s.appendAudit(ctx, c, rec)
	})
}

// GetDashboardSession returns a session with its token as it is now.
func (s *Store) GetDashboardSession(ctx context.Context, idHash string) (store.DashboardSession, error) {
	var d store.DashboardSession
	err := s.reader().queryRow(ctx, `SELECT `+sessionCols+` FROM dashboard_sessions s
		JOIN admin_tokens t ON t.id = s.token_id WHERE s.id_hash = ?`, idHash).Scan(append([]any{
		&d.IDHash, &d.TokenID, timeCol{&d.CreatedAt}, timeCol{&d.LastSeen}, &d.PeerIP, &d.UserAgent},
		tokenDest(&d.Token)...)...)
	return d, noRows(err, "dashboard session", idHash[:min(8, len(idHash))]+"…")
}

// TouchDashboardSession records activity; LastSeen never moves back.
func (s *Store) TouchDashboardSession(ctx context.Context, idHash string, seen time.Time) error {
	return s.write(ctx, func(c conn) error {
		err := affected(c.exec(ctx, `UPDATE dashboard_sessions SET last_seen = CASE WHEN last_seen < ? THEN ? ELSE last_seen END
			WHERE id_hash = ?`, s.tv(normTime(seen)), s.tv(normTime(seen)), idHash))
		return noRows(err, "dashboard session", idHash[:min(8, len(idHash))]+"…")
	})
}

// DeleteDashboardSession ends a session (sign-out).
func (s *Store) DeleteDashboardSession(ctx context.Context, idHash string, rec *audit.Record) error {
	return s.write(ctx, func(c conn) error {
		if err := affected(c.exec(ctx, `DELETE FROM dashboard_sessions WHERE id_hash = ?`, idHash)); err != nil {
			return noRows(err, "dashboard session", idHash[:min(8, len(idHash))]+"…")
		}
		return s.appendAudit(ctx, c, rec)
	})
}

// DeleteIdleDashboardSessions removes sessions last seen before seenBefore.
func (s *Store) DeleteIdleDashboardSessions(ctx context.Context, seenBefore time.Time) (int, error) {
	var n int64
	err := s.write(ctx, func(c conn) error {
		res, err := c.exec(ctx, `DELETE FROM dashboard_sessions WHERE last_seen < ?`, s.tv(normTime(seenBefore)))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}
