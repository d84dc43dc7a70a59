package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/lifecycle"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// workerWriteCols are the columns CreateWorker writes; workerCols adds those
// only the attempt transactions change.
const (
	workerWriteCols = `id, name, type, status, gpu_info, provider, labels, admin_labels, persistent,
	local, current_job_id, protocol, agent_version, last_heartbeat, connected_at, stream_instance,
	created_at, created_by, capabilities, labels_locked, session, gpu_conditions, gpu_clears, token_hash`
	workerCols = workerWriteCols + `, running, gpus_used, held_whole`
)

type scanner interface{ Scan(dest ...any) error }

func scanWorker(r scanner, extra ...any) (store.Worker, error) {
	var w store.Worker
	dest := append([]any{&w.ID, &w.Name, &w.Type, &w.Status, gpuInfoCol{&w.GPUInfo}, &w.Provider,
		jsonCol{&w.Labels}, jsonCol{&w.AdminLabels}, &w.Persistent, &w.Local, &w.CurrentJobID,
		&w.Protocol, &w.AgentVersion, nullTimeCol{&w.LastHeartbeat}, nullTimeCol{&w.ConnectedAt},
		&w.StreamInstance, timeCol{&w.CreatedAt}, &w.CreatedBy, jsonCol{&w.Capabilities}, &w.LabelsLocked, &w.Session,
		jsonCol{&w.GPUConditions}, jsonCol{&w.GPUClears}, &w.TokenHash,
		&w.Running, &w.GPUsUsed, &w.WholeWorkerHeld}, extra...)
	err := r.Scan(dest...)
	if len(w.GPUConditions) == 0 {
		w.GPUConditions = nil // as stored: no conditions, however written
	}
	if len(w.GPUClears) == 0 {
		w.GPUClears = nil
	}
	return w, err
}

// workerArgs binds every column but id and token_hash, in workerCols order.
func (s *Store) workerArgs(w *store.Worker) []any {
	return []any{w.Name, w.Type, w.Status, rawArg(w.GPUInfo.Raw, "{}"), w.Provider,
		labelsArg(w.Labels), labelsArg(w.AdminLabels), w.Persistent, w.Local, w.CurrentJobID,
		w.Protocol, w.AgentVersion, s.ntv(w.LastHeartbeat), s.ntv(w.ConnectedAt), w.StreamInstance,
		s.tv(w.CreatedAt), w.CreatedBy, plainJSON(w.Capabilities), w.LabelsLocked, w.Session,
		listArg(w.GPUConditions), listArg(w.GPUClears)}
}

// plainJSON binds a value of plain fields (numbers, strings, lists of
// them), which always marshals, as JSON text.
func plainJSON(v any) any {
	b, _ := json.Marshal(v) // plain fields always marshal
	return string(b)
}

// listArg stores a list as JSON text, an empty list for nil.
func listArg[T any](l []T) any {
	if l == nil {
		return "[]"
	}
	return plainJSON(l)
}

// CreateWorker inserts w with its token hash.
func (s *Store) CreateWorker(ctx context.Context, w store.Worker, tokenHash string, rec *audit.Record) error {
	if tokenHash == "" {
		return errors.New("store: a worker needs a token hash")
	}
	if w.ID == "" {
		w.ID = protocol.NewWorkerID()
	}
	w.CreatedAt = now(w.CreatedAt)
	return s.write(ctx, func(c conn) error {
		args := append(append([]any{w.ID}, s.workerArgs(&w)...), tokenHash)
		if _, err := c.exec(ctx, `INSERT INTO workers (`+workerWriteCols+`) VALUES (`+placeholders(len(args))+`)`, args...); err != nil {
			return err
		}
		return s.appendAudit(ctx, c, rec)
	})
}

func (s *Store) getWorker(ctx context.Context, c conn, id string, lock bool) (store.Worker, error) {
	q := `SELECT ` + workerCols + ` FROM workers WHERE id = ?`
	if lock {
		q += s.d.ForUpdate
	}
	w, err := scanWorker(c.queryRow(ctx, q, id))
	return w, noRows(err, "worker", id)
}

// workerLoad reads and locks the part of a worker row that a claim or a
// freed attempt reads and changes: status, current job, running attempts,
// GPUs in use and whether an attempt holds it whole, and what its room
// follows from (GPUs, the ones it keeps out of use, protocol, capabilities). The rest of the row (labels, times, token) stays unread:
// these reads run inside the single writer's turn.
func (s *Store) workerLoad(ctx context.Context, c conn, id string) (store.Worker, error) {
	var w store.Worker
	err := c.queryRow(ctx, `SELECT id, status, gpu_info, protocol, capabilities, current_job_id, running, gpus_used,
		held_whole, gpu_conditions FROM workers WHERE id = ?`+s.d.ForUpdate, id).Scan(&w.ID, &w.Status, gpuInfoCol{&w.GPUInfo},
		&w.Protocol, jsonCol{&w.Capabilities}, &w.CurrentJobID, &w.Running, &w.GPUsUsed, &w.WholeWorkerHeld, jsonCol{&w.GPUConditions})
	return w, noRows(err, "worker", id)
}

// GetWorker returns one worker.
func (s *Store) GetWorker(ctx context.Context, id string) (store.Worker, error) {
	return s.getWorker(ctx, s.reader(), id, false)
}

// GetWorkers reads several workers (each once) in one query per workersPage
// IDs, only those in one of statuses when any are given. The IN list always
// has workersPage entries (the last ID repeated), so the query has one text
// per number of statuses and is prepared once.
func (s *Store) GetWorkers(ctx context.Context, ids []string, statuses ...protocol.WorkerStatus) ([]store.Worker, error) {
	q := `SELECT ` + workerCols + ` FROM workers WHERE id IN (` + placeholders(workersPage) + `)`
	if len(statuses) > 0 {
		q += ` AND status IN (` + placeholders(len(statuses)) + `)`
	}
	ids = slices.Compact(slices.Sorted(slices.Values(ids)))
	var out []store.Worker
	for page := range slices.Chunk(ids, workersPage) {
		args := make([]any, workersPage, workersPage+len(statuses))
		for i := range args {
			args[i] = page[min(i, len(page)-1)]
		}
		for _, st := range statuses {
			args = append(args, st)
		}
		rows, err := s.reader().query(ctx, q, args...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			w, err := scanWorker(rows)
			if err != nil {
				rows.Close()
				return nil, err
			}
			out = append(out, w)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// workersPage is how many workers one query of GetWorkers reads.
const workersPage = 32

// GetWorkerState reads a worker's type, status, current job and token hash.
func (s *Store) GetWorkerState(ctx context.Context, id string) (store.WorkerState, error) {
	var w store.WorkerState
	err := s.reader().queryRow(ctx, `SELECT type, status, current_job_id, token_hash FROM workers WHERE id = ?`, id).
		Scan(&w.Type, &w.Status, &w.CurrentJobID, &w.TokenHash)
	return w, noRows(err, "worker", id)
}

// GetWorkerByTokenHash finds the worker a token belongs to.
func (s *Store) GetWorkerByTokenHash(ctx context.Context, hash string) (store.Worker, error) {
	if hash == "" {
		return store.Worker{}, fmt.Errorf("worker with an empty token hash: %w", store.ErrNotFound)
	}
	w, err := scanWorker(s.reader().queryRow(ctx, `SELECT `+workerCols+` FROM workers WHERE token_hash = ?`, hash))
	return w, noRows(err, "worker with token hash", hash[:min(8, len(hash))]+"…")
}

// reportingWorkerCols are the columns GetReportingWorkerByTokenHash reads:
// what a report's authentication, session check, GPU conditions and GPU
// seconds use. Labels, capabilities and times are left unread and undecoded.
const reportingWorkerCols = `id, name, type, status, session, token_hash, last_heartbeat, gpu_info, gpu_conditions, gpu_clears`

// GetReportingWorkerByTokenHash finds the worker a token belongs to, with
// only reportingWorkerCols filled in.
func (s *Store) GetReportingWorkerByTokenHash(ctx context.Context, hash string) (store.Worker, error) {
	if hash == "" {
		return store.Worker{}, fmt.Errorf("worker with an empty token hash: %w", store.ErrNotFound)
	}
	var w store.Worker
	err := s.reader().queryRow(ctx, `SELECT `+reportingWorkerCols+` FROM workers WHERE token_hash = ?`, hash).Scan(
		&w.ID, &w.Name, &w.Type, &w.Status, &w.Session, &w.TokenHash, nullTimeCol{&w.LastHeartbeat},
		gpuInfoCol{&w.GPUInfo}, jsonCol{&w.GPUConditions}, jsonCol{&w.GPUClears})
	if len(w.GPUConditions) == 0 {
		w.GPUConditions = nil // as scanWorker returns them
	}
	if len(w.GPUClears) == 0 {
		w.GPUClears = nil
	}
	return w, noRows(err, "worker with token hash", hash[:min(8, len(hash))]+"…")
}

// ListWorkers returns a page of workers by creation time, with the total count.
// The total is a count of its own: a window count over the page query would
// read every worker's whole row for each page.
func (s *Store) ListWorkers(ctx context.Context, f store.WorkerFilter) ([]store.Worker, int, error) {
	where, args := " WHERE 1 = 1", []any{}
	if f.Status != "" {
		where += " AND status = ?"
		args = append(args, f.Status)
	}
	if f.Name != "" {
		where += " AND name = ?"
		args = append(args, f.Name)
	}
	rows, err := s.reader().query(ctx, `SELECT `+workerCols+` FROM workers`+where+
		` ORDER BY created_at, id LIMIT ? OFFSET ?`, append(args, limitArg(f.Limit), f.Offset)...)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	var out []store.Worker
	for rows.Next() {
		w, err := scanWorker(rows)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	total := 0
	err = s.reader().queryRow(ctx, `SELECT COUNT(*) FROM workers`+where, args...).Scan(&total)
	return out, total, err
}

// SummarizeWorkers counts workers by status, GPU description and whether they
// hold a job. A fleet has few distinct GPU descriptions, so this returns a
// handful of rows where ListWorkers would return every worker.
func (s *Store) SummarizeWorkers(ctx context.Context) ([]store.WorkerGroup, error) {
	// gpu_info is compared as text: PostgreSQL's json type has no equality.
	rows, err := s.reader().query(ctx, `SELECT status, CAST(gpu_info AS TEXT), CASE WHEN current_job_id = '' THEN 0 ELSE 1 END, COUNT(*),
		SUM(gpus_used) FROM workers GROUP BY status, CAST(gpu_info AS TEXT), CASE WHEN current_job_id = '' THEN 0 ELSE 1 END`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.WorkerGroup
	for rows.Next() {
		var g store.WorkerGroup
		var hasJob int
		if err := rows.Scan(&g.Status, gpuInfoCol{&g.GPUInfo}, &hasJob, &g.Count, &g.GPUsUsed); err != nil {
			return nil, err
		}
		g.HasJob = hasJob == 1
		out = append(out, g)
	}
	return out, rows.Err()
}

// UpdateWorker is a read-modify-write of one worker in one transaction. fn
// cannot change the ID or the token hash.
func (s *Store) UpdateWorker(ctx context.Context, id string, fn func(*store.Worker) (*audit.Record, error)) (store.Worker, error) {
	var out store.Worker
	var emitted bool
	err := s.write(ctx, func(c conn) error {
		w, err := s.getWorker(ctx, c, id, true)
		if err != nil {
			return err
		}
		before := w
		before.GPUConditions = slices.Clone(w.GPUConditions)
		tokenHash := w.TokenHash
		rec, err := fn(&w)
		if err != nil {
			return err
		}
		w.ID, w.TokenHash = id, tokenHash
		if w, err = s.putWorker(ctx, c, w); err != nil {
			return err
		}
		out = w
		if emitted, err = s.emitWorker(ctx, c, before, w, rec); err != nil {
			return err
		}
		return s.appendAudit(ctx, c, rec)
	})
	s.committed(emitted, err)
	return out, err
}

// putWorker writes every mutable column of w and returns it as stored.
func (s *Store) putWorker(ctx context.Context, c conn, w store.Worker) (store.Worker, error) {
	_, err := c.exec(ctx, `UPDATE workers SET name = ?, type = ?, status = ?, gpu_info = ?, provider = ?,
		labels = ?, admin_labels = ?, persistent = ?, local = ?, current_job_id = ?, protocol = ?,
		agent_version = ?, last_heartbeat = ?, connected_at = ?, stream_instance = ?, created_at = ?,
		created_by = ?, capabilities = ?, labels_locked = ?, session = ?, gpu_conditions = ?, gpu_clears = ?
		WHERE id = ?`, append(s.workerArgs(&w), w.ID)...)
	if err != nil {
		return w, err
	}
	return s.getWorker(ctx, c, w.ID, false)
}

// SetWorkerTokenHash replaces a worker's token hash (token rotation).
func (s *Store) SetWorkerTokenHash(ctx context.Context, id, hash string, rec *audit.Record) error {
	if hash == "" {
		return errors.New("store: a worker needs a token hash")
	}
	return s.write(ctx, func(c conn) error {
		if err := affected(c.exec(ctx, `UPDATE workers SET token_hash = ? WHERE id = ?`, hash, id)); err != nil {
			return noRows(err, "worker", id)
		}
		return s.appendAudit(ctx, c, rec)
	})
}

// DeleteWorker removes a worker and the GPU leases it had; its jobs and
// attempts keep their history.
func (s *Store) DeleteWorker(ctx context.Context, id string, rec *audit.Record) error {
	return s.write(ctx, func(c conn) error {
		if err := affected(c.exec(ctx, `DELETE FROM workers WHERE id = ?`, id)); err != nil {
			return noRows(err, "worker", id)
		}
		if _, err := c.exec(ctx, `DELETE FROM gpu_leases WHERE worker_id = ?`, id); err != nil {
			return err
		}
		return s.appendAudit(ctx, c, rec)
	})
}

// freeWorker gives back what attempt n of job jobID held on its worker: its
// GPU leases and its slot. The worker's status follows the lifecycle's rule,
// and its current job becomes another it still runs, if any. A deleted
// worker has nothing to free.
func (s *Store) freeWorker(ctx context.Context, c conn, workerID, jobID string, n int) (freed int64, err error) {
	w, err := s.workerLoad(ctx, c, workerID)
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	res, err := c.exec(ctx, `DELETE FROM gpu_leases WHERE job_id = ? AND attempt = ? AND worker_id = ?`, jobID, n, workerID)
	if err != nil {
		return 0, err
	}
	if freed, err = res.RowsAffected(); err != nil {
		return 0, err
	}
	// An attempt holding the worker whole runs alone: whichever ends, none
	// holds it whole any more.
	w.Running, w.GPUsUsed, w.WholeWorkerHeld = max(w.Running-1, 0), max(w.GPUsUsed-int(freed), 0), false
	current := w.CurrentJobID
	if current == jobID {
		current = ""
		if w.Running > 0 {
			err := c.queryRow(ctx, `SELECT id FROM jobs WHERE worker_id = ? AND id <> ? AND status IN (?, ?, ?)
				ORDER BY seq LIMIT 1`, workerID, jobID, protocol.JobDispatched, protocol.JobRunning, protocol.JobCanceling).Scan(&current)
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return 0, err
			}
		}
	}
	_, err = c.exec(ctx, `UPDATE workers SET current_job_id = ?, status = ?, running = ?, gpus_used = ?, held_whole = ? WHERE id = ?`,
		current, lifecycle.Settle(w.Status, w.Capacity().Load()), w.Running, w.GPUsUsed, w.WholeWorkerHeld, workerID)
	return freed, err
}

// GPULeases lists the GPUs of a worker that attempts hold.
func (s *Store) GPULeases(ctx context.Context, workerID string) ([]store.GPULease, error) {
	rows, err := s.reader().query(ctx, `SELECT worker_id, gpu_index, job_id, attempt FROM gpu_leases
		WHERE worker_id = ? ORDER BY gpu_index`, workerID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.GPULease
	for rows.Next() {
		var l store.GPULease
		if err := rows.Scan(&l.WorkerID, &l.Index, &l.JobID, &l.Attempt); err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, rows.Err()
}
