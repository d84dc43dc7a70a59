package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"syscall"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// Store implements store.Store on database/sql. Publish and Subscribe fan out
// within the process; a backend with cross-process notifications overrides them.
type Store struct {
	db  *sql.DB // every write transaction
	rdb *sql.DB // plain reads; the same pool as db where the engine allows
	d   *Dialect
	log *slog.Logger
	hub *Hub
	// stmts caches prepared statements of both pools.
	stmts *stmtCache
	// group, on an engine with one writer, commits queued writes together.
	group *groupCommit
	// outbox turns changes into webhook events, written with them.
	outbox outboxHook
	// subs knows, with one writer, whether any subscription exists.
	subs subscribed
}

var _ store.Store = (*Store)(nil)

// New wraps open, migrated pools. rdb may be nil or db itself.
func New(db, rdb *sql.DB, d Dialect, log *slog.Logger) *Store {
	if rdb == nil {
		rdb = db
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Store{db: db, rdb: rdb, d: &d, log: log, hub: NewHub(), stmts: newStmtCache()}
	if d.GroupCommit {
		s.group = &groupCommit{s: s}
	}
	return s
}

// DB returns the write pool (for backend-specific statements).
func (s *Store) DB() *sql.DB { return s.db }

// ReadDB returns the read pool (the write pool where the engine has one).
func (s *Store) ReadDB() *sql.DB { return s.rdb }

// Hub returns the in-process fan-out used by Publish and Subscribe.
func (s *Store) Hub() *Hub { return s.hub }

// Kind names the engine, as its dialect does.
func (s *Store) Kind() string { return s.d.Name }

// Ping reports whether the database answers.
func (s *Store) Ping(ctx context.Context) error { return s.rdb.PingContext(ctx) }

// Close closes subscriptions and pools.
func (s *Store) Close() error {
	s.hub.Close()
	s.stmts.close()
	var err error
	if s.rdb != s.db {
		err = s.rdb.Close()
	}
	return errors.Join(err, s.db.Close())
}

// Publish delivers n to this process's subscribers.
func (s *Store) Publish(_ context.Context, n store.Notification) error {
	s.hub.Publish(n)
	return nil
}

// Subscribe returns notifications until ctx ends or the store closes.
func (s *Store) Subscribe(ctx context.Context) (<-chan store.Notification, error) {
	return s.hub.Subscribe(ctx), nil
}

// querier is what *sql.DB and *sql.Tx have in common.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// conn runs queries written with ? placeholders on a pool or a transaction,
// through cached prepared statements where it has a cache.
type conn struct {
	q querier
	d *Dialect
	// cache, pool, tx and missed are set for the store's own conns: pool is
	// the pool the statements belong to, tx the transaction (nil on a pool),
	// missed collects the texts a transaction found uncached.
	cache  *stmtCache
	pool   *sql.DB
	tx     *sql.Tx
	missed *[]string
	// detached: statements run to their end even when their context ends.
	detached bool
}

func (c conn) context(ctx context.Context) context.Context {
	if c.detached {
		return context.WithoutCancel(ctx)
	}
	return ctx
}

func (c conn) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	ctx = c.context(ctx)
	query = c.d.rebind(query)
	if st := c.stmt(ctx, query); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return c.q.ExecContext(ctx, query, args...)
}

func (c conn) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	ctx = c.context(ctx)
	query = c.d.rebind(query)
	if st := c.stmt(ctx, query); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return c.q.QueryContext(ctx, query, args...)
}

func (c conn) queryRow(ctx context.Context, query string, args ...any) *sql.Row {
	ctx = c.context(ctx)
	query = c.d.rebind(query)
	if st := c.stmt(ctx, query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return c.q.QueryRowContext(ctx, query, args...)
}

// reader returns a conn on the read pool.
func (s *Store) reader() conn { return conn{q: s.rdb, d: s.d, cache: s.stmts, pool: s.rdb} }

// write runs fn in a write transaction and commits if it returns nil. A unique
// violation anywhere inside becomes store.ErrDuplicate.
func (s *Store) write(ctx context.Context, fn func(c conn) error) error {
	if s.group != nil {
		return s.group.write(ctx, fn)
	}
	return s.writeTx(ctx, false, fn)
}

// writeTx runs fn in a transaction of its own. detached statements ignore the
// end of their context (see groupCommit).
func (s *Store) writeTx(ctx context.Context, detached bool, fn func(c conn) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	var missed []string
	// Statements first seen in here are prepared once the connection is free.
	defer func() {
		for _, q := range missed {
			s.stmts.prepare(context.WithoutCancel(ctx), s.db, q)
		}
	}()
	if err := fn(conn{q: tx, d: s.d, cache: s.stmts, pool: s.db, tx: tx, missed: &missed, detached: detached}); err != nil {
		_ = tx.Rollback()
		return s.mapErr(err)
	}
	return s.mapErr(tx.Commit())
}

func (s *Store) mapErr(err error) error {
	if err != nil && s.d.IsUnique != nil && s.d.IsUnique(err) && !errors.Is(err, store.ErrDuplicate) {
		return fmt.Errorf("%w: %v", store.ErrDuplicate, err)
	}
	if err != nil && !errors.Is(err, store.ErrDiskFull) && (errors.Is(err, syscall.ENOSPC) || s.d.IsDiskFull != nil && s.d.IsDiskFull(err)) {
		return fmt.Errorf("%w: %w", store.ErrDiskFull, err)
	}
	return err
}

// tv binds a timestamp.
func (s *Store) tv(t time.Time) any { return s.d.Time(normTime(t)) }

// ntv binds a nullable timestamp.
func (s *Store) ntv(t *time.Time) any {
	if t == nil {
		return nil
	}
	return s.tv(*t)
}

// normTime is the precision both engines keep: UTC microseconds.
func normTime(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// normTimePtr is normTime for a nullable timestamp, in a value of its own.
func normTimePtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	n := normTime(*t)
	return &n
}

// now returns t, or the current time when t is zero, at stored precision.
func now(t time.Time) time.Time {
	if t.IsZero() {
		t = time.Now()
	}
	return normTime(t)
}

// noRows maps sql.ErrNoRows to store.ErrNotFound naming what was missing.
func noRows(err error, what, id string) error {
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%s %q: %w", what, id, store.ErrNotFound)
	}
	return err
}

// affected turns "no row matched" into sql.ErrNoRows.
func affected(res sql.Result, err error) error {
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err == nil && n == 0 {
		return sql.ErrNoRows
	}
	return err
}
