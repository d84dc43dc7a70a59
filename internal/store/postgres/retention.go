package postgres

import (
	"context"
	"database/sql/driver"
	"time"
)

// retentionLockKey is the advisory lock every replica takes before a
// retention pass; any constant they agree on ("stmr" in ASCII).
const retentionLockKey = 1937010034

// TryRetentionLock takes a session-level advisory lock on a connection of its
// own, so that one replica at a time runs a retention pass; another replica
// gets ok false at once and skips its pass. The lock goes with the
// connection if the process dies.
func (s *Store) TryRetentionLock(ctx context.Context) (func(), bool, error) {
	conn, err := s.DB().Conn(ctx)
	if err != nil {
		return nil, false, err
	}
	var ok bool
	if err := conn.QueryRowContext(ctx, `SELECT pg_try_advisory_lock($1)`, retentionLockKey).Scan(&ok); err != nil || !ok {
		_ = conn.Close()
		return nil, false, err
	}
	unlock := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_unlock($1)`, retentionLockKey); err != nil {
			// A connection that could not unlock must not go back to the
			// pool still holding the lock.
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
		_ = conn.Close()
	}
	return unlock, true, nil
}
