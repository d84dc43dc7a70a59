// Package retention deletes what has outlived its retention period:
// finished jobs with everything of theirs, jobs' logs, their artifacts, audit
// records. It deletes in short, paced transactions so that the work of the
// fleet never waits behind it for long, and measures how big the history is
// for /metrics.
package retention

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"sync/atomic"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/artifacts"
	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// Options say how long finished jobs and their traces are kept; a period of
// 0 keeps them forever.
type Options struct {
	Jobs, Logs, Artifacts, Audit time.Duration
	Interval                     time.Duration // between passes
	BatchSize                    int           // rows per transaction
}

// OptionsFrom reads the [retention] settings.
func OptionsFrom(c config.RetentionConfig) Options {
	return Options{Jobs: c.Jobs.Duration, Logs: c.Logs.Duration, Artifacts: c.Artifacts.Duration,
		Audit: c.Audit.Duration, Interval: c.Interval.Duration, BatchSize: c.BatchSize}
}

// Keeper runs retention for one orchestrator. Its functions give what can
// change while it runs: the options (reloads), the artifact store (set once
// storage is up), the start-up grace.
type Keeper struct {
	Store        store.Store
	Artifacts    func() *artifacts.Store // nil: no artifact storage
	Log          *slog.Logger
	Options      func() Options
	StartupGrace func() time.Duration
	// Quiet reports whether err was already logged elsewhere (a full disk
	// is logged once per episode), so a pass that stops on it says nothing.
	Quiet func(err error) bool

	metrics metrics
	sizes   atomic.Pointer[sizesSnapshot]
}

// metrics count what retention did.
type metrics struct {
	passes                           atomic.Int64
	running                          atomic.Int64
	jobs, logs, artifacts, auditRecs atomic.Int64
	logBytes                         atomic.Int64
	lastPassNanos                    atomic.Int64
}

// Run runs a retention pass every interval, the first once the
// start-up grace is over (a restarted fleet reconnects first). Each pass
// deletes in batches, one short transaction each (sized to hold the writer
// about batchTarget, at most batch_size rows), and pauses between batches as
// long as the batch took, so heartbeats, reports and dispatch never wait
// behind it for long. It never touches a job that has not finished.
func (k *Keeper) Run(ctx context.Context) {
	wait := k.StartupGrace()
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		k.Pass(ctx)
		k.RefreshSizes(ctx)
		wait = k.Options().Interval
	}
}

// Pass deletes what has expired: jobs, then logs, artifacts and
// audit records, then gives the space back. With several orchestrators on
// one database, one of them runs a pass at a time.
func (k *Keeper) Pass(ctx context.Context) {
	opt := k.Options()
	if opt.Jobs <= 0 && opt.Logs <= 0 && opt.Artifacts <= 0 && opt.Audit <= 0 {
		return
	}
	unlock, ok, err := k.Store.TryRetentionLock(ctx)
	if err != nil {
		k.Log.Warn("retention: could not take the retention lock; skipping this pass", "err", err)
		return
	}
	if !ok {
		k.Log.Debug("retention: another orchestrator is running a pass")
		return
	}
	defer unlock()
	m := &k.metrics
	m.running.Store(1)
	defer m.running.Store(0)
	start := time.Now()
	p := &pass{k: k, batch: max(opt.BatchSize, 1)}
	now := time.Now().UTC()
	// Each kind starts small again: its rows cost differently.
	p.size = min(p.batch, firstBatch)
	if opt.Jobs > 0 {
		p.run("jobs", func() error { return p.jobs(ctx, now.Add(-opt.Jobs)) })
	}
	if opt.Logs > 0 {
		p.size = min(p.batch, firstBatch)
		p.run("logs", func() error { return p.logs(ctx, now.Add(-opt.Logs)) })
	}
	if opt.Artifacts > 0 && k.Artifacts() != nil {
		p.size = p.batch // a mark per batch: the deletes are on the artifacts' disk
		p.run("artifacts", func() error { return p.artifacts(ctx, now.Add(-opt.Artifacts)) })
	}
	if opt.Audit > 0 {
		p.size = min(p.batch, firstBatch)
		p.run("audit", func() error { return p.audit(ctx, now.Add(-opt.Audit)) })
	}
	if p.deleted() > 0 {
		p.run("reclaim", func() error { return k.Store.Reclaim(ctx) })
	}
	took := time.Since(start)
	m.passes.Add(1)
	m.lastPassNanos.Store(int64(took))
	level := k.Log.Debug
	if p.deleted() > 0 {
		level = k.Log.Info
	}
	meanWrite := time.Duration(0)
	if p.writes > 0 {
		meanWrite = p.writeTime / time.Duration(p.writes)
	}
	level("retention pass done", "jobs", p.jobsN, "logs", p.logsN, "log_bytes", p.logBytes,
		"artifacts", p.artifactsN, "audit_records", p.auditN, "took", took.Round(time.Millisecond).String(),
		"transactions", p.writes, "mean_transaction", meanWrite.Round(100*time.Microsecond).String())
}

// pass is one retention pass's progress.
type pass struct {
	k     *Keeper
	batch int // most rows per transaction (batch_size)
	// size is the rows of the next transaction: it follows how long the
	// last one held the writer (see took).
	size                             int
	jobsN, logsN, artifactsN, auditN int64
	logBytes                         int64
	// writes and writeTime sum the delete transactions, for the log.
	writes    int64
	writeTime time.Duration
}

// A delete transaction should hold the database's writer about batchTarget:
// the batch size follows from how long the previous one took, between
// minBatch and batch_size, starting at firstBatch. Rows cost very different
// times (a job with a big log, an audit record) and machines differ, so a
// fixed count is either slow or long.
const (
	batchTarget = 15 * time.Millisecond
	minBatch    = 10
	firstBatch  = 50
)

// took adapts the batch size to a write of n rows that took d.
func (p *pass) took(d time.Duration, n int) {
	if n <= 0 {
		return
	}
	p.writes++
	p.writeTime += d
	next := int(float64(n) * float64(batchTarget) / float64(max(d, time.Microsecond)))
	p.size = min(max(next, minBatch), p.batch)
}

func (p *pass) deleted() int64 { return p.jobsN + p.logsN + p.artifactsN + p.auditN }

// run runs one kind's part of the pass and logs its failure (once: each
// part stops at its first error and the next pass tries again).
func (p *pass) run(kind string, fn func() error) {
	if err := fn(); err != nil && !errors.Is(err, context.Canceled) && !p.k.Quiet(err) {
		p.k.Log.Warn("retention: "+kind+" stopped early; the next pass goes on", "err", err)
	}
}

// pace waits as long as the batch that started at start took: a pass holds
// the database's writer at most half of the time.
func pace(ctx context.Context, start time.Time) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(max(time.Since(start), time.Millisecond)):
		return nil
	}
}

// eachBatch hands fn the finished jobs that ended before cutoff, after
// mark, a batch of p.size at a time, pacing between batches, until none is
// left or fn fails.
func (p *pass) eachBatch(ctx context.Context, mark store.RetentionMark, cutoff time.Time, fn func([]store.EndedJob) error) error {
	for {
		start := time.Now()
		batch, err := p.k.Store.EndedJobs(ctx, mark, cutoff, p.size)
		if err != nil || len(batch) == 0 {
			return err
		}
		mark = batch[len(batch)-1].Mark()
		if err := fn(batch); err != nil {
			return err
		}
		if err := pace(ctx, start); err != nil {
			return err
		}
	}
}

// jobs deletes finished jobs that ended before cutoff, their artifacts first
// (so that no file outlives its job's rows), then their rows.
func (p *pass) jobs(ctx context.Context, cutoff time.Time) error {
	k := p.k
	arts := k.Artifacts()
	return p.eachBatch(ctx, store.RetentionMark{}, cutoff, func(batch []store.EndedJob) error {
		ids := make([]string, 0, len(batch))
		var artErr error
		for _, j := range batch {
			if arts != nil {
				if err := arts.DeleteJob(ctx, j.ID); err != nil {
					artErr = err
					continue // kept, with its rows, for the next pass
				}
			}
			ids = append(ids, j.ID)
		}
		if len(ids) == 0 {
			return fmt.Errorf("deleting the artifacts of %d jobs failed: %w", len(batch), artErr)
		}
		w := time.Now()
		n, err := k.Store.DeleteJobs(ctx, ids, cutoff)
		if err != nil {
			return err
		}
		p.took(time.Since(w), len(ids))
		p.jobsN += int64(n)
		k.metrics.jobs.Add(int64(n))
		if artErr != nil {
			k.Log.Warn("retention: some jobs keep their artifacts and rows until the next pass", "err", artErr)
		}
		return nil
	})
}

// logs deletes the logs of jobs that ended before cutoff, from the logs mark on.
func (p *pass) logs(ctx context.Context, cutoff time.Time) error {
	k := p.k
	mark, err := k.Store.RetentionMark(ctx, store.RetainLogs)
	if err != nil {
		return err
	}
	return p.eachBatch(ctx, mark, cutoff, func(batch []store.EndedJob) error {
		ids := make([]string, len(batch))
		for i, j := range batch {
			ids[i] = j.ID
		}
		w := time.Now()
		freed, err := k.Store.DeleteJobLogs(ctx, ids, cutoff, batch[len(batch)-1].Mark())
		if err != nil {
			return err
		}
		p.took(time.Since(w), len(ids))
		p.logsN += int64(len(batch))
		p.logBytes += freed
		k.metrics.logs.Add(int64(len(batch)))
		k.metrics.logBytes.Add(freed)
		return nil
	})
}

// artifacts deletes the artifacts of jobs that ended before cutoff, from the
// artifacts mark on; the mark stops before the first job whose deletion
// failed, so it is tried again next pass.
func (p *pass) artifacts(ctx context.Context, cutoff time.Time) error {
	k := p.k
	arts := k.Artifacts()
	mark, err := k.Store.RetentionMark(ctx, store.RetainArtifacts)
	if err != nil {
		return err
	}
	return p.eachBatch(ctx, mark, cutoff, func(batch []store.EndedJob) error {
		var failed error
		done := mark
		for _, j := range batch {
			if err := arts.DeleteJob(ctx, j.ID); err != nil {
				failed = fmt.Errorf("job %s: %w", j.ID, err)
				break
			}
			// Its checkpoints were among its artifacts: none is kept now.
			if err := k.Store.DeleteCheckpoints(ctx, j.ID); err != nil {
				failed = fmt.Errorf("job %s: %w", j.ID, err)
				break
			}
			done = j.Mark()
			p.artifactsN++
			k.metrics.artifacts.Add(1)
		}
		if done != mark {
			if err := k.Store.SetRetentionMark(ctx, store.RetainArtifacts, done); err != nil {
				return err
			}
			mark = done
		}
		return failed
	})
}

// audit deletes audit records made before cutoff, oldest first; the store
// verifies each batch and keeps its last record as the checkpoint.
func (p *pass) audit(ctx context.Context, cutoff time.Time) error {
	k := p.k
	for {
		start := time.Now()
		n, _, err := k.Store.PruneAudit(ctx, cutoff, p.size)
		if err != nil || n == 0 {
			return err
		}
		p.took(time.Since(start), n)
		p.auditN += int64(n)
		k.metrics.auditRecs.Add(int64(n))
		if err := pace(ctx, start); err != nil {
			return err
		}
	}
}

// sizesSnapshot is what /metrics shows of the store's and artifacts' sizes,
// refreshed in the background: counting them costs more than a scrape should.
type sizesSnapshot struct {
	store         store.Sizes
	artifactBytes int64 // -1: unknown
	at            time.Time
}

// sizesEvery is how often the sizes are refreshed besides after each pass.
const sizesEvery = 5 * time.Minute

// RunSizes refreshes the sizes at start and every sizesEvery.
func (k *Keeper) RunSizes(ctx context.Context) {
	for {
		k.RefreshSizes(ctx)
		select {
		case <-ctx.Done():
			return
		case <-time.After(sizesEvery):
		}
	}
}

// RefreshSizes measures the database and the artifacts now.
func (k *Keeper) RefreshSizes(ctx context.Context) {
	sz, err := k.Store.Sizes(ctx)
	if err != nil {
		if ctx.Err() == nil {
			k.Log.Debug("could not measure the database's size", "err", err)
		}
		return
	}
	snap := &sizesSnapshot{store: sz, artifactBytes: -1, at: time.Now()}
	if a := k.Artifacts(); a != nil {
		if n, err := a.TotalBytes(ctx); err == nil {
			snap.artifactBytes = n
		}
	}
	k.sizes.Store(snap)
}

// WriteMetrics writes what retention did and how big the history is (as
// last measured in the background; see RunSizes) in the Prometheus text
// format.
func (k *Keeper) WriteMetrics(w io.Writer, counter, gauge func(name, help string, v int64)) {
	r := &k.metrics
	counter("simpletuner_retention_passes_total", "Retention passes completed.", r.passes.Load())
	gauge("simpletuner_retention_running", "1 while a retention pass runs on this instance.", r.running.Load())
	fmt.Fprintf(w, "# HELP simpletuner_retention_last_pass_seconds How long the last retention pass took.\n# TYPE simpletuner_retention_last_pass_seconds gauge\nsimpletuner_retention_last_pass_seconds %g\n",
		time.Duration(r.lastPassNanos.Load()).Seconds())
	fmt.Fprintf(w, "# HELP simpletuner_retention_deleted_total What retention deleted: finished jobs (with everything of theirs), jobs' logs, jobs' artifacts, audit records.\n# TYPE simpletuner_retention_deleted_total counter\n")
	for _, kv := range []struct {
		kind string
		n    int64
	}{{"jobs", r.jobs.Load()}, {"logs", r.logs.Load()}, {"artifacts", r.artifacts.Load()}, {"audit", r.auditRecs.Load()}} {
		fmt.Fprintf(w, "simpletuner_retention_deleted_total{kind=%q} %d\n", kv.kind, kv.n)
	}
	counter("simpletuner_retention_log_bytes_deleted_total", "Log bytes deleted by retention.", r.logBytes.Load())

	snap := k.sizes.Load()
	if snap == nil {
		return
	}
	fmt.Fprintf(w, "# HELP simpletuner_db_rows Rows per table (PostgreSQL: the statistics' estimate, except jobs and audit).\n# TYPE simpletuner_db_rows gauge\n")
	tables := make([]string, 0, len(snap.store.Rows))
	for t := range snap.store.Rows {
		tables = append(tables, t)
	}
	sort.Strings(tables)
	for _, t := range tables {
		fmt.Fprintf(w, "simpletuner_db_rows{table=%q} %d\n", t, snap.store.Rows[t])
	}
	gauge("simpletuner_log_bytes", "Bytes of job logs stored in the database.", snap.store.LogBytes)
	if snap.artifactBytes >= 0 {
		gauge("simpletuner_artifact_bytes", "Bytes of artifacts stored (every job, every attempt).", snap.artifactBytes)
	}
	if snap.store.FileBytes >= 0 {
		gauge("simpletuner_db_file_bytes", "Size of the SQLite database file and its write-ahead log.", snap.store.FileBytes)
	}
	if snap.store.FreeBytes >= 0 {
		gauge("simpletuner_db_free_bytes", "Free space inside the SQLite file not yet given back to the filesystem.", snap.store.FreeBytes)
	}
	gauge("simpletuner_sizes_age_seconds", "Seconds since the sizes above were measured.", int64(time.Since(snap.at).Seconds()))
}
