-- Checkpoints kept in a job's artifacts. A row is written only once every
-- file of the checkpoint is stored and checked (the commit is the
-- completeness marker); files holds [{"path","size","sha256"}]. A retry
-- resumes from the newest row.
CREATE TABLE checkpoints (
    job_id     text NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    attempt    integer NOT NULL,
    name       text NOT NULL,
    step       bigint NOT NULL,
    bytes      bigint NOT NULL,
    files      jsonb NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (job_id, attempt, name)
);
CREATE INDEX checkpoints_newest ON checkpoints (job_id, step DESC, attempt DESC);
-- A submit may opt out of keeping checkpoints.
ALTER TABLE jobs ADD COLUMN no_checkpoints boolean NOT NULL DEFAULT false;
