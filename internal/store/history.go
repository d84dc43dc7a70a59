package store

import (
	"context"
	"time"
)

// AuditLink names one record of the audit chain by its sequence number and
// hash. {0, audit.Genesis} stands for "before the first record".
type AuditLink struct {
	Seq  int64     `json:"seq"`
	Hash string    `json:"hash"`
	Time time.Time `json:"time,omitzero"`
}

// RetentionMark is how far a retention kind has worked through the finished
// jobs, in the order they ended: everything up to and including (EndedAt, Seq)
// is done. The zero mark is "nothing yet".
type RetentionMark struct {
	EndedAt time.Time
	Seq     int64
}

// EndedJob is a finished job as retention sees it.
type EndedJob struct {
	ID      string
	Seq     int64
	EndedAt time.Time
}

// Mark is the retention mark just after j.
func (j EndedJob) Mark() RetentionMark { return RetentionMark{EndedAt: j.EndedAt, Seq: j.Seq} }

// Retention kinds that keep a mark (jobs need none: deleted rows are gone).
const (
	RetainLogs      = "logs"
	RetainArtifacts = "artifacts"
)

// Sizes is what the database holds, for /metrics.
type Sizes struct {
	// Rows per table. Exact on SQLite; PostgreSQL's statistics estimate
	// (pg_stat_user_tables.n_live_tup), refreshed by autovacuum and analyze.
	Rows map[string]int64
	// LogBytes is the job logs' stored bytes (over every job).
	LogBytes int64
	// FileBytes is the database file and its write-ahead log (SQLite; -1
	// where the database is not a local file).
	FileBytes int64
	// FreeBytes is space inside the file that deleted rows left and that
	// incremental vacuum has not yet given back (SQLite; -1 elsewhere).
	FreeBytes int64
}

// History is what keeps the history bounded: deleting what retention
// expires, in small transactions, and reporting sizes. Nothing here ever
// touches a job that is not finished (terminal with an end time).
type History interface {
	// EndedJobs lists up to limit finished jobs that ended before before and
	// after the mark, in the order they ended (ended_at, then Seq).
	EndedJobs(ctx context.Context, after RetentionMark, before time.Time, limit int) ([]EndedJob, error)
	// DeleteJobs deletes those of ids that are finished and ended before
	// before, with their attempts and logs, in one transaction; the per-status
	// counts follow. It returns how many jobs went.
	DeleteJobs(ctx context.Context, ids []string, before time.Time) (int, error)
	// DeleteJobLogs deletes the logs of those of ids that are finished and
	// ended before before, and moves the logs mark to mark, in one
	// transaction. It returns the log bytes deleted.
	DeleteJobLogs(ctx context.Context, ids []string, before time.Time, mark RetentionMark) (int64, error)
	// RetentionMark returns kind's mark (the zero mark when none is stored).
	RetentionMark(ctx context.Context, kind string) (RetentionMark, error)
	// SetRetentionMark stores kind's mark.
	SetRetentionMark(ctx context.Context, kind string, m RetentionMark) error
	// PruneAudit deletes up to limit of the oldest audit records made before
	// before. The chain stays verifiable: the records are verified first
	// (an error, and nothing deleted, when they do not link up) and the last
	// one deleted becomes the checkpoint, in the same transaction. It returns
	// how many went and the checkpoint in force.
	PruneAudit(ctx context.Context, before time.Time, limit int) (int, AuditLink, error)
	// AuditBounds returns the checkpoint (the last record deleted by
	// retention; {0, audit.Genesis} when none) and the chain head.
	AuditBounds(ctx context.Context) (checkpoint, head AuditLink, err error)
	// Sizes reports rows, log bytes and the database file's size.
	Sizes(ctx context.Context) (Sizes, error)
	// Reclaim gives space freed by deletions back to the filesystem where
	// the engine needs to be asked (SQLite's incremental vacuum), a little
	// at a time; elsewhere it does nothing.
	Reclaim(ctx context.Context) error
	// ProbeWrite makes a small write that changes nothing anyone reads, to
	// see whether writes work again after the disk was full.
	ProbeWrite(ctx context.Context) error
	// TryRetentionLock takes the lock that lets one orchestrator run a
	// retention pass at a time (a PostgreSQL advisory lock shared by every
	// replica). ok is false when another holds it; unlock releases it.
	TryRetentionLock(ctx context.Context) (unlock func(), ok bool, err error)
}
