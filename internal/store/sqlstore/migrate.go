package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// Migration is one numbered schema change.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// LoadMigrations reads NNN_name.sql files from the root of fsys, in order.
func LoadMigrations(fsys fs.FS) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".sql") {
			continue
		}
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name must be NNN_name.sql", name)
		}
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: v, Name: strings.TrimSuffix(name, ".sql"), SQL: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i := range out {
		if out[i].Version != i+1 {
			return nil, fmt.Errorf("migration %s: versions must run 1, 2, 3… without gaps", out[i].Name)
		}
	}
	return out, nil
}

// Migrate applies the migrations db lacks, each in its own transaction with its
// version recorded in schema_migrations. A database already past the last
// known version is store.ErrSchemaTooNew.
func Migrate(ctx context.Context, db *sql.DB, d Dialect, ms []Migration, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	known := len(ms)
	for {
		applied, err := migrateNext(ctx, conn{d: &d}, db, ms)
		if err != nil {
			return err
		}
		if applied == nil {
			return nil
		}
		log.Info("applied database migration", "engine", d.Name, "version", applied.Version, "name", applied.Name, "known", known)
	}
}

// migrateNext applies the first missing migration, or returns nil when none is.
func migrateNext(ctx context.Context, c conn, db *sql.DB, ms []Migration) (*Migration, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()
	c.q = tx
	if c.d.MigrationLock != "" {
		if _, err := c.exec(ctx, c.d.MigrationLock); err != nil {
			return nil, fmt.Errorf("migration lock: %w", err)
		}
	}
	if _, err := c.exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)`); err != nil {
		return nil, err
	}
	var cur int
	if err := c.queryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&cur); err != nil {
		return nil, err
	}
	if cur > len(ms) {
		return nil, fmt.Errorf("%w: the database is at version %d, this binary knows versions up to %d",
			store.ErrSchemaTooNew, cur, len(ms))
	}
	if cur == len(ms) {
		return nil, tx.Commit()
	}
	m := ms[cur]
	if _, err := c.q.ExecContext(ctx, m.SQL); err != nil {
		return nil, fmt.Errorf("migration %s: %w", m.Name, err)
	}
	if _, err := c.exec(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
		m.Version, m.Name, time.Now().UnixMicro()); err != nil {
		return nil, err
	}
	return &m, tx.Commit()
}
