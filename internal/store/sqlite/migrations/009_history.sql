-- A history that stays fast and bounded as it grows.

-- How many jobs are in each status, kept in the same transaction as every
-- insert and status change, so counting never scans the history.
CREATE TABLE job_counts (
    status TEXT PRIMARY KEY,
    n      INTEGER NOT NULL
) STRICT;
INSERT INTO job_counts (status, n) SELECT status, COUNT(*) FROM jobs GROUP BY status;

-- Lists read a page at a time, newest or oldest first: by status, and by
-- worker (with or without a status). The worker index is not partial so that
-- "worker_id = ?" may use it on both engines.
CREATE INDEX jobs_by_status ON jobs (status, seq);
DROP INDEX jobs_by_worker;
CREATE INDEX jobs_by_worker ON jobs (worker_id, status, seq);

-- Retention walks finished jobs in the order they ended, and the counts of
-- jobs that ended in a recent window read the window's part: one index for
-- both, ordered by end time first (only finished jobs have one), with the
-- status in it so that counting by status never reads the rows.
DROP INDEX jobs_by_end;
CREATE INDEX jobs_by_end ON jobs (ended_at, seq, status) WHERE ended_at IS NOT NULL;

-- The last audit record deleted by retention: verification starts from it.
CREATE TABLE audit_checkpoint (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    seq  INTEGER NOT NULL,
    hash TEXT NOT NULL,
    time INTEGER
) STRICT;
INSERT INTO audit_checkpoint (id, seq, hash) VALUES (1, 0, 'genesis');

-- How far each retention kind has worked through the finished jobs, in the
-- order they ended.
CREATE TABLE retention_marks (
    kind     TEXT PRIMARY KEY,
    ended_at INTEGER NOT NULL,
    seq      INTEGER NOT NULL
) STRICT;
