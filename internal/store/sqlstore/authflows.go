package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// PutAuthFlow stores a sign-in in progress, first deleting those that have
// expired: flows are few and short, so sweeping on every insert keeps the
// table small without a pass of its own.
func (s *Store) PutAuthFlow(ctx context.Context, f store.AuthFlow) error {
	if f.StateHash == "" || f.Provider == "" {
		return errors.New("store: an auth flow needs a state hash and a provider")
	}
	created := now(f.CreatedAt)
	if !f.ExpiresAt.After(created) {
		return fmt.Errorf("store: auth flow expires at %s, not after it was made (%s)", f.ExpiresAt, created)
	}
	return s.write(ctx, func(c conn) error {
		if _, err := c.exec(ctx, `DELETE FROM auth_flows WHERE expires_at <= ?`, s.tv(created)); err != nil {
			return err
		}
		_, err := c.exec(ctx, `INSERT INTO auth_flows (state_hash, provider, nonce, verifier, return_to, created_at, expires_at)
			VALUES (?, ?, ?, ?, ?, ?, ?)`, f.StateHash, f.Provider, f.Nonce, f.Verifier, f.ReturnTo, s.tv(created), s.tv(f.ExpiresAt))
		return err
	})
}

// TakeAuthFlow deletes the flow and returns what it held, in one statement:
// of two takes of the same state, whichever deletes the row gets it, and
// the other finds nothing. An expired flow is deleted too.
func (s *Store) TakeAuthFlow(ctx context.Context, stateHash string, at time.Time) (store.AuthFlow, error) {
	f := store.AuthFlow{StateHash: stateHash}
	short := stateHash[:min(8, len(stateHash))] + "…"
	err := s.write(ctx, func(c conn) error {
		return c.queryRow(ctx, `DELETE FROM auth_flows WHERE state_hash = ?
			RETURNING provider, nonce, verifier, return_to, created_at, expires_at`, stateHash).Scan(
			&f.Provider, &f.Nonce, &f.Verifier, &f.ReturnTo, timeCol{&f.CreatedAt}, timeCol{&f.ExpiresAt})
	})
	if err != nil {
		return store.AuthFlow{}, noRows(err, "auth flow", short)
	}
	if !f.ExpiresAt.After(at) {
		return store.AuthFlow{}, fmt.Errorf("auth flow %q expired at %s: %w", short, f.ExpiresAt.Format(time.RFC3339), store.ErrNotFound)
	}
	return f, nil
}
