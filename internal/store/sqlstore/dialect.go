// Package sqlstore is the database/sql implementation of store.Store shared by
// the PostgreSQL and SQLite backends. What differs between them (placeholders,
// row locks, time columns, error codes, migration locking) is a Dialect; the
// backend packages own the driver imports, the migrations and notifications.
package sqlstore

import (
	"strconv"
	"strings"
	"time"
)

// Dialect describes one SQL engine.
type Dialect struct {
	Name string
	// Dollar: placeholders are $1, $2… (queries are written with ?).
	Dollar bool
	// ForUpdate is appended to a SELECT that must lock the rows it reads until
	// the transaction ends ("" where there is one writer at a time).
	ForUpdate string
	// SkipLocked is appended to the claim scan so concurrent claimers pass over
	// each other's candidates instead of waiting.
	SkipLocked string
	// NextSeq is the SQL expression giving a new job its submission number.
	NextSeq string
	// MigrationLock, when set, runs first in every migration transaction so two
	// instances starting together migrate one after the other.
	MigrationLock string
	// Time converts a timestamp into the value bound for a time column.
	Time func(time.Time) any
	// IsUnique reports whether err is a unique or primary key violation.
	IsUnique func(error) bool
	// IsDiskFull reports whether err says the database has no space left.
	IsDiskFull func(error) bool
	// WritableCTEs: the engine runs DELETE inside WITH, so a batch of
	// retention deletes can be one statement.
	WritableCTEs bool
	// RowCounts, when set, is a query of (table, rows) pairs that estimates
	// table sizes without scanning them; without it tables are counted.
	RowCounts string
	// GroupCommit: the engine has one writer, so write transactions that
	// queue up behind each other are committed together (see groupCommit).
	// A write whose batch failed then runs again alone: the reason
	// store.Store lets a transaction function run more than once.
	GroupCommit bool
}

// rebind rewrites ? placeholders for engines that number them.
func (d *Dialect) rebind(q string) string {
	if !d.Dollar || !strings.Contains(q, "?") {
		return q
	}
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// UnixMicros is a Dialect.Time for engines storing times as integer
// microseconds since the epoch (UTC).
func UnixMicros(t time.Time) any { return t.UnixMicro() }

// UTCTime is a Dialect.Time for engines with a native timestamp type.
func UTCTime(t time.Time) any { return t.UTC() }
