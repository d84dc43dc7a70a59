package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log"
	"strings"
	"time"

	_ "github.com/lib/pq"  // PostgreSQL's driver, for bulk loading with COPY
	_ "modernc.org/sqlite" // the embedded store's driver, for bulk loading

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
)

// The history generator fills a database that an orchestrator has created
// (and migrated) with n finished jobs, straight in SQL: going through the API
// would take hours. Every job has one attempt (every tenth two: a lost one,
// then the one that finished), a small log, and three audit records (submit,
// dispatch, final transition) forming a valid hash chain, so retention's
// verification and the audit endpoints see a real chain. Jobs end over the
// span before now, evenly; 80 % completed, 10 % failed, 10 % cancelled; the
// last attempt ran on one of histWorkers made-up workers.

const (
	histWorkers = 50
	histLogLine = "step 1000/1000 loss=0.0421 lr=1.0e-04 it/s=3.2 vram=61.2GiB eta=00:00:00\n"
)

// histWorker is the id of made-up worker k.
func histWorker(k int) string { return fmt.Sprintf("w_hist%06d", k) }

// histJob is the id of generated job i (1-based).
func histJob(i int) string { return fmt.Sprintf("j_h%011d", i) }

type histSpec struct {
	n    int
	span time.Duration // jobs end evenly over [now-span, now-1h]
	now  time.Time
}

func (h histSpec) created(i int) time.Time {
	step := (h.span - time.Hour) / time.Duration(h.n)
	return h.now.Add(-h.span).Add(time.Duration(i) * step).UTC().Truncate(time.Microsecond)
}

func (h histSpec) status(i int) string {
	switch i % 10 {
	case 0:
		return "failed"
	case 1:
		return "cancelled"
	}
	return "completed"
}

// generate loads the history into the database at dsn ("sqlite" path or a
// PostgreSQL URL).
func generate(ctx context.Context, engine, dsn string, h histSpec) error {
	driver := "postgres"
	if engine == "sqlite" {
		driver = "sqlite"
		dsn += "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(OFF)"
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	start := time.Now()
	logText := strings.Repeat(histLogLine, 8)
	var stmts []string
	if engine == "sqlite" {
		// i runs 1..n; times are integer microseconds.
		series := `WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < %d) `
		t0 := h.created(0).UnixMicro()
		step := h.created(1).UnixMicro() - t0
		at := func(offset time.Duration) string {
			return fmt.Sprintf("(%d + i * %d + %d)", t0, step, offset.Microseconds())
		}
		statusExpr := `CASE i % 10 WHEN 0 THEN 'failed' WHEN 1 THEN 'cancelled' ELSE 'completed' END`
		attempts := `CASE WHEN i % 10 = 5 THEN 2 ELSE 1 END`
		worker := fmt.Sprintf(`printf('w_hist%%06d', i %% %d)`, histWorkers)
		stmts = []string{
			fmt.Sprintf(series+`INSERT INTO jobs (id, seq, config_name, config, target, worker_labels, gpu_count, priority,
				max_retries, retries_used, status, attempt, worker_id, error, submitted_by, created_at, updated_at, started_at, ended_at)
				SELECT printf('j_h%%011d', i), i, 'bench-lora', '{"model_type":"lora","model_family":"flux","learning_rate":0.0001,"max_train_steps":1000}',
				'auto', '{}', 1, 10, 3, %s - 1, %s, %s, %s, CASE i %% 10 WHEN 0 THEN 'trainer exited with status 1' ELSE '' END,
				'admin:bench', %s, %s, %s, %s FROM c`, h.n, attempts, statusExpr, attempts, worker, at(0), at(time.Minute), at(time.Second), at(time.Minute)),
			fmt.Sprintf(series+`INSERT INTO attempts (job_id, number, worker_id, upload_token_hash, dispatched_at, acked_at, ended_at, outcome, error)
				SELECT printf('j_h%%011d', i), 1, %s, '', %s, %s, %s, CASE WHEN i %% 10 = 5 THEN 'worker_lost' WHEN i %% 10 = 0 THEN 'failed'
				WHEN i %% 10 = 1 THEN 'cancelled' ELSE 'completed' END, '' FROM c`, h.n, worker, at(time.Second/2), at(time.Second), at(time.Minute)),
			fmt.Sprintf(series+`INSERT INTO attempts (job_id, number, worker_id, upload_token_hash, dispatched_at, acked_at, ended_at, outcome, error)
				SELECT printf('j_h%%011d', i), 2, %s, '', %s, %s, %s, 'completed', '' FROM c WHERE i %% 10 = 5`, h.n, worker, at(2*time.Second), at(3*time.Second), at(time.Minute)),
			fmt.Sprintf(series+`INSERT INTO job_logs (job_id, attempt, "offset", data) SELECT printf('j_h%%011d', i), %s, 0, CAST(? AS BLOB) FROM c`, h.n, attempts),
			fmt.Sprintf(series+`INSERT INTO job_log_attempts (job_id, attempt, size) SELECT printf('j_h%%011d', i), %s, %d FROM c`, h.n, attempts, len(logText)),
			fmt.Sprintf(series+`INSERT INTO job_log_state (job_id, stored_bytes, truncated) SELECT printf('j_h%%011d', i), %d, 0 FROM c`, h.n, len(logText)),
		}
	} else {
		at := func(offset time.Duration) string {
			return fmt.Sprintf(`(TIMESTAMPTZ '%s' + (i::bigint * %d + %d) * INTERVAL '1 microsecond')`,
				h.created(0).Format(time.RFC3339Nano), h.created(1).Sub(h.created(0)).Microseconds(), offset.Microseconds())
		}
		series := `FROM generate_series(1, %d) AS c(i)`
		statusExpr := `CASE i % 10 WHEN 0 THEN 'failed' WHEN 1 THEN 'cancelled' ELSE 'completed' END`
		attempts := `CASE WHEN i % 10 = 5 THEN 2 ELSE 1 END`
		worker := fmt.Sprintf(`'w_hist' || lpad((i %% %d)::text, 6, '0')`, histWorkers)
		id := `'j_h' || lpad(i::text, 11, '0')`
		stmts = []string{
			fmt.Sprintf(`INSERT INTO jobs (id, seq, config_name, config, target, worker_labels, gpu_count, priority,
				max_retries, retries_used, status, attempt, worker_id, error, submitted_by, created_at, updated_at, started_at, ended_at)
				SELECT %s, i, 'bench-lora', '{"model_type":"lora","model_family":"flux","learning_rate":0.0001,"max_train_steps":1000}',
				'auto', '{}', 1, 10, 3, %s - 1, %s, %s, %s, CASE i %% 10 WHEN 0 THEN 'trainer exited with status 1' ELSE '' END,
				'admin:bench', %s, %s, %s, %s `+series, id, attempts, statusExpr, attempts, worker, at(0), at(time.Minute), at(time.Second), at(time.Minute), h.n),
			fmt.Sprintf(`INSERT INTO attempts (job_id, number, worker_id, upload_token_hash, dispatched_at, acked_at, ended_at, outcome, error)
				SELECT %s, 1, %s, '', %s, %s, %s, CASE WHEN i %% 10 = 5 THEN 'worker_lost' WHEN i %% 10 = 0 THEN 'failed'
				WHEN i %% 10 = 1 THEN 'cancelled' ELSE 'completed' END, '' `+series, id, worker, at(time.Second/2), at(time.Second), at(time.Minute), h.n),
			fmt.Sprintf(`INSERT INTO attempts (job_id, number, worker_id, upload_token_hash, dispatched_at, acked_at, ended_at, outcome, error)
				SELECT %s, 2, %s, '', %s, %s, %s, 'completed', '' `+series+` WHERE i %% 10 = 5`, id, worker, at(2*time.Second), at(3*time.Second), at(time.Minute), h.n),
			fmt.Sprintf(`INSERT INTO job_logs (job_id, attempt, "offset", data) SELECT %s, %s, 0, convert_to($1, 'UTF8') `+series, id, attempts, h.n),
			fmt.Sprintf(`INSERT INTO job_log_attempts (job_id, attempt, size) SELECT %s, %s, %d `+series, id, attempts, len(logText), h.n),
			fmt.Sprintf(`INSERT INTO job_log_state (job_id, stored_bytes, truncated) SELECT %s, %d, false `+series, id, len(logText), h.n),
		}
	}
	for _, q := range stmts {
		var err error
		if strings.Contains(q, "job_logs (") {
			_, err = db.ExecContext(ctx, q, logText)
		} else {
			_, err = db.ExecContext(ctx, q)
		}
		if err != nil {
			return fmt.Errorf("%.80s…: %w", strings.Join(strings.Fields(q), " "), err)
		}
	}
	log.Printf("%s: %d jobs with attempts and logs in %s; sealing %d audit records", engine, h.n, time.Since(start).Round(time.Second), 3*h.n)
	if err := generateAudit(ctx, db, engine, h); err != nil {
		return err
	}
	// What the store keeps beside the rows: the per-status counts (absent
	// before they existed) and PostgreSQL's job sequence.
	var hasCounts bool
	if engine == "sqlite" {
		err = db.QueryRowContext(ctx, `SELECT COUNT(*) > 0 FROM sqlite_master WHERE name = 'job_counts'`).Scan(&hasCounts)
	} else {
		err = db.QueryRowContext(ctx, `SELECT to_regclass('job_counts') IS NOT NULL`).Scan(&hasCounts)
	}
	if err != nil {
		return err
	}
	final := []string{}
	if hasCounts {
		final = append(final, `DELETE FROM job_counts`, `INSERT INTO job_counts (status, n) SELECT status, COUNT(*) FROM jobs GROUP BY status`)
	}
	if engine == "sqlite" {
		final = append(final, `PRAGMA wal_checkpoint(TRUNCATE)`)
	} else {
		// Autovacuum would have vacuumed and analyzed tables this size long
		// ago; left to itself it would do so during the measurements.
		final = append(final, `SELECT setval('jobs_seq_seq', (SELECT MAX(seq) FROM jobs))`, `VACUUM ANALYZE`)
	}
	for _, q := range final {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	log.Printf("%s: history generated in %s", engine, time.Since(start).Round(time.Second))
	return nil
}

// generateAudit writes three sealed records per job at the start of the
// chain, in time order, and the records the daemon wrote when it made the
// database (its admin token) after them, sealed again: the log reads as if
// the history had happened first, which is what audit retention expects.
func generateAudit(ctx context.Context, db *sql.DB, engine string, h histSpec) error {
	var existing []audit.Record
	rows, err := db.QueryContext(ctx, `SELECT time, actor, actor_ip, action, target_type, target_id, outcome, details FROM audit ORDER BY seq`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var r audit.Record
		var t any
		var details string
		if err := rows.Scan(&t, &r.Actor, &r.ActorIP, &r.Action, &r.TargetType, &r.TargetID, &r.Outcome, &details); err != nil {
			rows.Close()
			return err
		}
		switch v := t.(type) {
		case int64:
			r.Time = time.UnixMicro(v).UTC()
		case time.Time:
			r.Time = v.UTC()
		}
		r.Details = json.RawMessage(details)
		existing = append(existing, r)
	}
	rows.Close()
	if _, err := db.ExecContext(ctx, `DELETE FROM audit`); err != nil {
		return err
	}
	seq, hash := int64(0), audit.Genesis
	const batch = 20000
	var recs []audit.Record
	flush := func() error {
		if len(recs) == 0 {
			return nil
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback() }()
		var st *sql.Stmt
		if engine == "sqlite" {
			st, err = tx.PrepareContext(ctx, `INSERT INTO audit (seq, time, actor, actor_ip, action, target_type, target_id,
				outcome, details, prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
		} else {
			st, err = tx.PrepareContext(ctx, `COPY audit (seq, time, actor, actor_ip, action, target_type, target_id,
				outcome, details, prev_hash, hash) FROM STDIN`)
		}
		if err != nil {
			return err
		}
		for _, r := range recs {
			var t any = r.Time
			if engine == "sqlite" {
				t = r.Time.UnixMicro()
			}
			if _, err := st.ExecContext(ctx, r.Seq, t, r.Actor, r.ActorIP, r.Action, r.TargetType, r.TargetID,
				r.Outcome, string(r.Details), r.PrevHash, r.Hash); err != nil {
				return err
			}
		}
		if engine != "sqlite" {
			if _, err := st.ExecContext(ctx); err != nil {
				return err
			}
		}
		if err := st.Close(); err != nil {
			return err
		}
		last := recs[len(recs)-1]
		if _, err := tx.ExecContext(ctx, rebindFor(engine, `UPDATE audit_head SET seq = ?, hash = ? WHERE id = 1`), last.Seq, last.Hash); err != nil {
			return err
		}
		recs = recs[:0]
		return tx.Commit()
	}
	add := func(t time.Time, actor, action, targetType, target string, details any) {
		raw, _ := json.Marshal(details)
		r := audit.Record{Time: t, Actor: actor, ActorIP: "", Action: action, TargetType: targetType,
			TargetID: target, Outcome: audit.Success, Details: raw}
		if actor == "admin:bench" {
			r.ActorIP = "10.0.0.7"
		}
		audit.Seal(&r, seq, hash)
		seq, hash = r.Seq, r.Hash
		recs = append(recs, r)
	}
	for i := 1; i <= h.n; i++ {
		c := h.created(i)
		id, w := histJob(i), histWorker(i%histWorkers)
		add(c, "admin:bench", "job.submit", "job", id, map[string]any{"config_name": "bench-lora", "target": "auto", "priority": 10})
		add(c.Add(time.Second/2), "system", "job.dispatch", "worker", w, nil)
		add(c.Add(time.Minute), "worker:"+w, "job.transition", "job", id, map[string]any{"from": "running", "to": h.status(i), "attempt": 1})
		if len(recs) >= batch {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	for _, r := range existing {
		audit.Seal(&r, seq, hash)
		seq, hash = r.Seq, r.Hash
		recs = append(recs, r)
	}
	return flush()
}

func rebindFor(engine, q string) string {
	if engine == "sqlite" {
		return q
	}
	n := 0
	var b strings.Builder
	for _, r := range q {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
