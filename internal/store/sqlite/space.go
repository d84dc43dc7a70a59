package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// Space is given back in steps of pages (4 KiB each), each a write
// transaction sized to take about reclaimTarget: retention never holds the
// writer for long.
const (
	reclaimTarget = 15 * time.Millisecond
	reclaimFirst  = 64
	reclaimMin    = 16
	reclaimMax    = 4096
)

// AutoConvertBytes is the largest database that Open switches to incremental
// auto-vacuum by itself (a VACUUM that rewrites the file, about a second
// here); a larger one is left alone with a warning, for the vacuum command.
const AutoConvertBytes = 64 << 20

// reclaimPause is the least pause between reclaim steps.
const reclaimPause = 5 * time.Millisecond

const incremental = 2 // PRAGMA auto_vacuum's value for INCREMENTAL

// ensureIncremental makes sure retention can shrink the file: SQLite only
// gives freed pages back to the filesystem in auto-vacuum mode, and a
// database switches mode only by being rewritten (VACUUM). New and small
// databases are switched here; a large one would hold up the start, so it
// keeps working as it is (freed pages are reused, the file does not shrink)
// and the log says how to switch it.
func ensureIncremental(ctx context.Context, db *sql.DB, path string, log *slog.Logger) error {
	var mode int
	if err := db.QueryRowContext(ctx, `PRAGMA auto_vacuum`).Scan(&mode); err != nil {
		return err
	}
	if mode == incremental {
		return nil
	}
	size := FileBytes(path)
	if size > AutoConvertBytes {
		log.Warn("the database file cannot give space freed by retention back to the filesystem: it predates incremental auto-vacuum. "+
			"Freed space is reused, but the file does not shrink. To switch it once, stop the orchestrator and run "+
			"'simpletuner-orchestratord --config FILE vacuum' (it rewrites the file and needs that much free space).",
			"path", path, "bytes", size)
		return nil
	}
	if err := convert(ctx, db); err != nil {
		return fmt.Errorf("switching to incremental auto-vacuum: %w", err)
	}
	if size > 0 {
		log.Info("switched the database to incremental auto-vacuum", "path", path, "bytes", size)
	}
	return nil
}

func convert(ctx context.Context, db *sql.DB) error {
	if _, err := db.ExecContext(ctx, `PRAGMA auto_vacuum = INCREMENTAL`); err != nil {
		return err
	}
	_, err := db.ExecContext(ctx, `VACUUM`)
	return err
}

// Vacuum rewrites the database file at path in incremental auto-vacuum mode,
// giving every free page back; the orchestrator must not be running. It
// returns the file's size before and after.
func Vacuum(ctx context.Context, path string) (before, after int64, err error) {
	if _, err := os.Stat(path); err != nil {
		return 0, 0, fmt.Errorf("sqlite: %w", err)
	}
	db, err := openPool(path, "_pragma=journal_mode(WAL)")
	if err != nil {
		return 0, 0, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	before = FileBytes(path)
	if err := convert(ctx, db); err != nil {
		return before, 0, fmt.Errorf("sqlite %s: %w", path, err)
	}
	if _, err := db.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		return before, 0, fmt.Errorf("sqlite %s: %w", path, err)
	}
	return before, FileBytes(path), nil
}

// FileBytes is the size of the database file and its write-ahead log.
func FileBytes(path string) int64 {
	var n int64
	for _, p := range []string{path, path + "-wal"} {
		if fi, err := os.Stat(p); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// Sizes adds the file's size and its free pages to the common sizes.
func (s *Store) Sizes(ctx context.Context) (store.Sizes, error) {
	out, err := s.Store.Sizes(ctx)
	if err != nil {
		return out, err
	}
	out.FileBytes = FileBytes(s.path)
	var free, pageSize int64
	r := s.Store.ReadDB()
	if err := r.QueryRowContext(ctx, `PRAGMA freelist_count`).Scan(&free); err != nil {
		return out, err
	}
	if err := r.QueryRowContext(ctx, `PRAGMA page_size`).Scan(&pageSize); err != nil {
		return out, err
	}
	out.FreeBytes = free * pageSize
	return out, nil
}

// Reclaim gives free pages back to the filesystem in short steps (each its
// own write transaction, sized to take about reclaimTarget) until none is
// left or ctx ends, pausing after each step as long as it took. A database
// not in incremental mode keeps its free pages for reuse.
func (s *Store) Reclaim(ctx context.Context) error {
	db := s.DB()
	var mode int
	if err := db.QueryRowContext(ctx, `PRAGMA auto_vacuum`).Scan(&mode); err != nil || mode != incremental {
		return err
	}
	step := int64(reclaimFirst)
	for ctx.Err() == nil {
		var free int64
		if err := db.QueryRowContext(ctx, `PRAGMA freelist_count`).Scan(&free); err != nil {
			return err
		}
		if free == 0 {
			return nil
		}
		n := min(free, step)
		start := time.Now()
		if _, err := db.ExecContext(ctx, fmt.Sprintf(`PRAGMA incremental_vacuum(%d)`, n)); err != nil {
			return err
		}
		took := time.Since(start)
		step = min(max(int64(float64(n)*float64(reclaimTarget)/float64(max(took, time.Microsecond))), reclaimMin), reclaimMax)
		select {
		case <-ctx.Done():
		case <-time.After(max(took, reclaimPause)):
		}
	}
	return ctx.Err()
}
