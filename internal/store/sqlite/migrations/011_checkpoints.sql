-- Checkpoints kept in a job's artifacts. A row is written only once every
-- file of the checkpoint is stored and checked (the commit is the
-- completeness marker); files holds [{"path","size","sha256"}]. A retry
-- resumes from the newest row.
CREATE TABLE checkpoints (
    job_id     TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    attempt    INTEGER NOT NULL,
    name       TEXT NOT NULL,
    step       INTEGER NOT NULL,
    bytes      INTEGER NOT NULL,
    files      TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (job_id, attempt, name)
) STRICT;
CREATE INDEX checkpoints_newest ON checkpoints (job_id, step DESC, attempt DESC);
-- A submit may opt out of keeping checkpoints.
ALTER TABLE jobs ADD COLUMN no_checkpoints INTEGER NOT NULL DEFAULT 0;
