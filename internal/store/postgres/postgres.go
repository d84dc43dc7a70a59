// Package postgres is the production store backend (PostgreSQL through lib/pq).
// Several orchestrator instances may share one database: claims use
// FOR UPDATE SKIP LOCKED, the audit chain head is a locked row, and
// notifications travel through LISTEN/NOTIFY. Each write is a transaction of
// its own and a transaction function runs once per call today; callers still
// write them to run more than once, as store.Store requires.
package postgres

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"sync"
	"time"

	"github.com/lib/pq"

	"github.com/simpletuner/simpletuner-orchestration/internal/store/sqlstore"
)

// maxConns bounds the connections one orchestrator holds to PostgreSQL.
const maxConns = 32

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Dialect is PostgreSQL's flavour of SQL.
var Dialect = sqlstore.Dialect{
	Name:       "postgres",
	Dollar:     true,
	ForUpdate:  " FOR UPDATE",
	SkipLocked: " FOR UPDATE SKIP LOCKED",
	NextSeq:    "nextval('jobs_seq_seq')",
	// Any constant both instances agree on; "stmg" in ASCII.
	MigrationLock: "SELECT pg_advisory_xact_lock(1937010023)",
	Time:          sqlstore.UTCTime,
	IsUnique:      isUnique,
	IsDiskFull:    isDiskFull,
	// The statistics' live-row estimates: counting a table of millions of
	// rows would read all of it.
	RowCounts:    `SELECT relname, n_live_tup FROM pg_stat_user_tables`,
	WritableCTEs: true,
}

// isDiskFull: SQLSTATE 53100, disk_full.
func isDiskFull(err error) bool {
	var e *pq.Error
	return errors.As(err, &e) && e.Code == "53100"
}

func isUnique(err error) bool {
	var e *pq.Error
	return errors.As(err, &e) && e.Code == "23505"
}

// Store is the PostgreSQL store.
type Store struct {
	*sqlstore.Store
	url string
	log *slog.Logger
	opt Options

	mu       sync.Mutex
	listener *pq.Listener // started by the first Subscribe
	closed   bool
}

// Options tune how the store talks to the server.
type Options struct {
	// Timeout is how long a request may wait for the server's first answer
	// byte before its connection is taken for dead (see answerConn); it also
	// bounds connecting, and the notification listener is pinged this often.
	// 0: wait forever.
	Timeout time.Duration
}

// Open connects to the database at url, migrates it and returns a ready
// store that waits for the server as long as it takes.
func Open(ctx context.Context, url string, log *slog.Logger) (*Store, error) {
	return OpenWith(ctx, url, Options{}, log)
}

// OpenWith is Open with options.
func OpenWith(ctx context.Context, url string, opt Options, log *slog.Logger) (*Store, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	connector, err := pq.NewConnector(url)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if opt.Timeout > 0 {
		connector.Dialer(answerDialer{timeout: opt.Timeout})
	}
	db := sql.OpenDB(connector)
	// Keep every connection the pool opens: one closed as surplus after a
	// burst of reports is opened again in the next, and each new connection
	// starts a server process. A quiet orchestrator lets them go.
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("postgres: %w", err)
	}
	ms, err := loadMigrations()
	if err == nil {
		err = sqlstore.Migrate(ctx, db, Dialect, ms, log)
	}
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return &Store{Store: sqlstore.New(db, nil, Dialect, log), url: url, log: log, opt: opt}, nil
}

func loadMigrations() ([]sqlstore.Migration, error) {
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	return sqlstore.LoadMigrations(sub)
}

// Close stops the listener and closes the pool.
func (s *Store) Close() error {
	s.mu.Lock()
	s.closed = true
	l := s.listener
	s.listener = nil
	s.mu.Unlock()
	var err error
	if l != nil {
		err = l.Close()
	}
	return errors.Join(err, s.Store.Close())
}
