package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

const tokenCols = `id, name, scopes, hash, created_at, revoked_at, team, max_priority, person_id, expires_at`

func scanToken(r scanner) (store.AdminToken, error) {
	var t store.AdminToken
	err := r.Scan(tokenDest(&t)...)
	return t, err
}

// tokenDest is where a row of tokenCols scans into t.
func tokenDest(t *store.AdminToken) []any {
	return []any{&t.ID, &t.Name, jsonCol{&t.Scopes}, &t.Hash, timeCol{&t.CreatedAt}, nullTimeCol{&t.RevokedAt}, &t.Team,
		nullIntCol{&t.MaxPriority}, nullStringCol{&t.PersonID}, nullTimeCol{&t.ExpiresAt}}
}

// nullStringCol scans text that may be NULL ("").
type nullStringCol struct{ p *string }

func (c nullStringCol) Scan(src any) error {
	b, ok, err := textOf(src)
	*c.p = string(b)
	if !ok {
		*c.p = ""
	}
	return err
}

// nullIfEmpty binds "" as NULL.
func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// CreateAdminToken stores a new token (its hash, never the token).
func (s *Store) CreateAdminToken(ctx context.Context, t store.AdminToken, rec *audit.Record) error {
	if t.ID == "" || t.Hash == "" {
		return fmt.Errorf("store: an admin token needs an id and a hash")
	}
	scopes := t.Scopes
	if scopes == nil {
		scopes = []string{}
	}
	sc, err := jsonArg(scopes)
	if err != nil {
		return err
	}
	return s.write(ctx, func(c conn) error {
		if t.PersonID != "" {
			if err := s.personLive(ctx, c, t.PersonID); err != nil {
				return err
			}
		}
		if _, err := c.exec(ctx, `INSERT INTO admin_tokens (`+tokenCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			t.ID, t.Name, sc, t.Hash, s.tv(now(t.CreatedAt)), s.ntv(t.RevokedAt), t.Team, t.MaxPriority, nullIfEmpty(t.PersonID),
			s.ntv(t.ExpiresAt)); err != nil {
			return err
		}
		return s.appendAudit(ctx, c, rec)
	})
}

// GetAdminTokenByHash finds a token, revoked or not; callers check RevokedAt.
func (s *Store) GetAdminTokenByHash(ctx context.Context, hash string) (store.AdminToken, error) {
	if hash == "" {
		return store.AdminToken{}, fmt.Errorf("admin token with an empty hash: %w", store.ErrNotFound)
	}
	t, err := scanToken(s.reader().queryRow(ctx, `SELECT `+tokenCols+` FROM admin_tokens WHERE hash = ?`, hash))
	return t, noRows(err, "admin token with hash", hash[:min(8, len(hash))]+"…")
}

// ListAdminTokens returns every token, oldest first.
func (s *Store) ListAdminTokens(ctx context.Context) ([]store.AdminToken, error) {
	rows, err := s.reader().query(ctx, `SELECT `+tokenCols+` FROM admin_tokens ORDER BY created_at, id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.AdminToken
	for rows.Next() {
		t, err := scanToken(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// RevokeAdminToken marks a token revoked now; revoking again keeps the first time.
func (s *Store) RevokeAdminToken(ctx context.Context, id string, rec *audit.Record) error {
	return s.write(ctx, func(c conn) error {
		if err := affected(c.exec(ctx, `UPDATE admin_tokens SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ?`,
			s.tv(now(time.Time{})), id)); err != nil {
			return noRows(err, "admin token", id)
		}
		return s.appendAudit(ctx, c, rec)
	})
}
