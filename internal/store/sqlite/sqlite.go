// Package sqlite is the embedded store backend (modernc.org/sqlite, pure Go):
// one file, one writer at a time, notifications within the process only.
// Writes queued behind each other are committed together; one whose batch
// failed runs again alone, so a transaction function (UpdateWorker's fn, the
// Outbox) may run twice, as store.Store allows.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/simpletuner/simpletuner-orchestration/internal/store/sqlstore"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Store is the SQLite store.
type Store struct {
	*sqlstore.Store
	path string
}

// Dialect is SQLite's flavour of SQL: no row locks (the single writer
// serializes everything), times as integer microseconds.
var Dialect = sqlstore.Dialect{
	GroupCommit: true,
	Name:        "sqlite",
	NextSeq:     "(SELECT COALESCE(MAX(seq), 0) + 1 FROM jobs)",
	Time:        sqlstore.UnixMicros,
	IsUnique:    isUnique,
	IsDiskFull:  isDiskFull,
}

// isDiskFull: SQLITE_FULL, whatever the extended code.
func isDiskFull(err error) bool {
	var e *sqlite.Error
	return errors.As(err, &e) && e.Code()&0xff == sqlite3.SQLITE_FULL
}

func isUnique(err error) bool {
	var e *sqlite.Error
	if !errors.As(err, &e) {
		return false
	}
	return e.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || e.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
}

// Open opens (creating if needed) the database file at path, migrates it and
// returns a ready store. The parent directory is created mode 0750, the file
// mode 0600.
func Open(ctx context.Context, path string, log *slog.Logger) (*Store, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := prepareFile(path); err != nil {
		return nil, err
	}
	// Writes go through one connection, and BEGIN IMMEDIATE takes the write lock
	// up front, so a transaction never fails half-way on a lock upgrade.
	w, err := openPool(path, "_txlock=immediate&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)")
	if err != nil {
		return nil, err
	}
	w.SetMaxOpenConns(1)
	w.SetConnMaxIdleTime(0)
	w.SetConnMaxLifetime(0)
	err = ensureIncremental(ctx, w, path, log)
	ms, lerr := loadMigrations()
	if err == nil {
		err = lerr
	}
	if err == nil {
		err = sqlstore.Migrate(ctx, w, Dialect, ms, log.With("path", path))
	}
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite %s: %w", path, err)
	}
	// Reads use their own pool: WAL lets them run beside the writer.
	r, err := openPool(path, "_pragma=query_only(1)")
	if err != nil {
		w.Close()
		return nil, err
	}
	r.SetMaxOpenConns(8)
	// Keep them all: database/sql's default of 2 idle ones closed the rest
	// after each burst of reads, and every new connection opened the file
	// and prepared its statements again.
	r.SetMaxIdleConns(8)
	return &Store{Store: sqlstore.New(w, r, Dialect, log), path: path}, nil
}

func loadMigrations() ([]sqlstore.Migration, error) {
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	return sqlstore.LoadMigrations(sub)
}

func openPool(path, params string) (*sql.DB, error) {
	dsn := path + "?_pragma=busy_timeout(10000)&_pragma=foreign_keys(1)&" + params
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlite %s: %w", path, err)
	}
	if err := db.Ping(); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite %s: %w", path, err)
	}
	return db, nil
}

// prepareFile creates the directory and an empty, private database file so
// SQLite never creates it with the process umask.
func prepareFile(path string) error {
	if path == "" || path == ":memory:" || strings.ContainsRune(path, '?') {
		return fmt.Errorf("sqlite: %q: need a database file path (without '?')", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return fmt.Errorf("sqlite: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("sqlite: %w", err)
	}
	return f.Close()
}
