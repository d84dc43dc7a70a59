package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

const personCols = `id, provider, issuer, subject, username, email, name, provider_groups, overrides, created_at, last_sign_in, disabled_at`

func scanPerson(r scanner) (store.Person, error) {
	var p store.Person
	err := r.Scan(&p.ID, &p.Provider, &p.Issuer, &p.Subject, &p.Username, &p.Email, &p.Name, jsonCol{&p.Groups},
		jsonCol{&p.Overrides}, timeCol{&p.CreatedAt}, timeCol{&p.LastSignIn}, nullTimeCol{&p.DisabledAt})
	return p, err
}

// RecordSignIn inserts the person, or updates them when their issuer and
// subject are known: the insert does nothing on that conflict (waiting, on
// PostgreSQL, for a concurrent insert of the same subject to commit), and
// the update then finds the row, so two first sign-ins make one person.
func (s *Store) RecordSignIn(ctx context.Context, p store.Person, rec func(store.Person, bool) *audit.Record) (store.Person, bool, error) {
	if p.ID == "" || p.Issuer == "" || p.Subject == "" || p.Provider == "" {
		return store.Person{}, false, errors.New("store: a person needs an id, an issuer, a subject and a provider")
	}
	groups := p.Groups
	if groups == nil {
		groups = []string{}
	}
	g, err := jsonArg(groups)
	if err != nil {
		return store.Person{}, false, err
	}
	at := s.tv(now(p.LastSignIn))
	var out store.Person
	var created bool
	err = s.write(ctx, func(c conn) error {
		n, err := rowsAffected(c.exec(ctx, `INSERT INTO people (id, provider, issuer, subject, username, email, name, provider_groups,
			created_at, last_sign_in) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (issuer, subject) DO NOTHING`,
			p.ID, p.Provider, p.Issuer, p.Subject, p.Username, p.Email, p.Name, g, at, at))
		if err != nil {
			return err
		}
		created = n == 1
		if !created {
			if _, err := c.exec(ctx, `UPDATE people SET provider = ?, username = ?, email = ?, name = ?, provider_groups = ?,
				last_sign_in = CASE WHEN disabled_at IS NULL THEN ? ELSE last_sign_in END WHERE issuer = ? AND subject = ?`,
				p.Provider, p.Username, p.Email, p.Name, g, at, p.Issuer, p.Subject); err != nil {
				return err
			}
		}
		out, err = scanPerson(c.queryRow(ctx, `SELECT `+personCols+` FROM people WHERE issuer = ? AND subject = ?`, p.Issuer, p.Subject))
		if err != nil {
			return err
		}
		if rec != nil {
			return s.appendAudit(ctx, c, rec(out, created))
		}
		return nil
	})
	if err != nil {
		return store.Person{}, false, err
	}
	return out, created, nil
}

// GetPerson reads one person.
func (s *Store) GetPerson(ctx context.Context, id string) (store.Person, error) {
	p, err := scanPerson(s.reader().queryRow(ctx, `SELECT `+personCols+` FROM people WHERE id = ?`, id))
	return p, noRows(err, "person", id)
}

// ListPeople returns a page of people by creation time, with the total count.
func (s *Store) ListPeople(ctx context.Context, f store.PeopleFilter) ([]store.Person, int, error) {
	rows, err := s.reader().query(ctx, `SELECT `+personCols+` FROM people ORDER BY created_at, id LIMIT ? OFFSET ?`,
		limitArg(f.Limit), f.Offset)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	var out []store.Person
	for rows.Next() {
		p, err := scanPerson(rows)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	total := 0
	err = s.reader().queryRow(ctx, `SELECT COUNT(*) FROM people`).Scan(&total)
	return out, total, err
}

// DisablePerson disables the person and ends every credential of theirs in
// one transaction: no token of theirs works once it commits. The person's
// row is written first, so a token being made for them at the same time
// (CreateAdminToken locks the row) either commits before, and is revoked
// here, or sees them disabled.
func (s *Store) DisablePerson(ctx context.Context, id string, at time.Time, rec func(store.PersonDisabled) *audit.Record) (store.PersonDisabled, error) {
	when := s.tv(now(at))
	var out store.PersonDisabled
	err := s.write(ctx, func(c conn) error {
		if err := affected(c.exec(ctx, `UPDATE people SET disabled_at = COALESCE(disabled_at, ?) WHERE id = ?`, when, id)); err != nil {
			return noRows(err, "person", id)
		}
		ended, err := rowsAffected(c.exec(ctx, `DELETE FROM dashboard_sessions
			WHERE token_id IN (SELECT id FROM admin_tokens WHERE person_id = ?)`, id))
		if err != nil {
			return err
		}
		revoked, err := rowsAffected(c.exec(ctx, `UPDATE admin_tokens SET revoked_at = ? WHERE person_id = ? AND revoked_at IS NULL`, when, id))
		if err != nil {
			return err
		}
		p, err := scanPerson(c.queryRow(ctx, `SELECT `+personCols+` FROM people WHERE id = ?`, id))
		if err != nil {
			return err
		}
		out = store.PersonDisabled{Person: p, TokensRevoked: int(revoked), SessionsEnded: int(ended)}
		if rec != nil {
			return s.appendAudit(ctx, c, rec(out))
		}
		return nil
	})
	if err != nil {
		return store.PersonDisabled{}, err
	}
	return out, nil
}

// EnablePerson lets a disabled person sign in again.
func (s *Store) EnablePerson(ctx context.Context, id string, rec *audit.Record) (store.Person, error) {
	return s.updatePerson(ctx, id, rec, `UPDATE people SET disabled_at = NULL WHERE id = ?`)
}

// SetPersonOverrides replaces the memberships an admin set; none is NULL.
func (s *Store) SetPersonOverrides(ctx context.Context, id string, overrides []store.Membership, rec *audit.Record) (store.Person, error) {
	var o any
	if len(overrides) > 0 {
		var err error
		if o, err = jsonArg(overrides); err != nil {
			return store.Person{}, err
		}
	}
	return s.updatePerson(ctx, id, rec, `UPDATE people SET overrides = ? WHERE id = ?`, o)
}

// updatePerson runs update (whose last argument is the person's id) and
// returns the person as it left them.
func (s *Store) updatePerson(ctx context.Context, id string, rec *audit.Record, update string, args ...any) (store.Person, error) {
	var out store.Person
	err := s.write(ctx, func(c conn) error {
		if err := affected(c.exec(ctx, update, append(args, id)...)); err != nil {
			return noRows(err, "person", id)
		}
		var err error
		if out, err = scanPerson(c.queryRow(ctx, `SELECT `+personCols+` FROM people WHERE id = ?`, id)); err != nil {
			return err
		}
		return s.appendAudit(ctx, c, rec)
	})
	return out, err
}

// personLive refuses, with the person's row locked until the transaction
// ends, a person who is unknown or disabled.
func (s *Store) personLive(ctx context.Context, c conn, id string) error {
	var disabled any
	err := c.queryRow(ctx, `SELECT disabled_at FROM people WHERE id = ?`+s.d.ForUpdate, id).Scan(&disabled)
	if err != nil {
		return noRows(err, "person", id)
	}
	if disabled != nil {
		return fmt.Errorf("person %q: %w", id, store.ErrPersonDisabled)
	}
	return nil
}

// rowsAffected is how many rows a statement changed.
func rowsAffected(res interface{ RowsAffected() (int64, error) }, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}
