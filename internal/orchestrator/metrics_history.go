package orchestrator

import (
	"fmt"
	"io"
	"sort"
	"time"
)

// writeHistoryMetrics writes what retention did and how big the history is
// (as last measured in the background; see runSizes).
func (s *Server) writeHistoryMetrics(w io.Writer, counter, gauge func(name, help string, v int64)) {
	r := &s.metrics.retention
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
	gauge("simpletuner_disk_full", "1 while writes fail because the database's or the artifacts' disk is full.", s.disk.fullGauge())

	snap := s.sizes.Load()
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
