-- Initial schema. Times are integer microseconds since the epoch (UTC); JSON is
-- text; booleans are 0/1. Tables are STRICT so a wrongly typed bind fails loudly.
-- Jobs keep worker ids as plain text: deleting a worker keeps the history of
-- what it ran.

CREATE TABLE workers (
    id              TEXT PRIMARY KEY,
    name            TEXT NOT NULL DEFAULT '',
    type            TEXT NOT NULL DEFAULT '',
    status          TEXT NOT NULL DEFAULT '',
    gpu_info        TEXT NOT NULL DEFAULT '{}',
    provider        TEXT NOT NULL DEFAULT '',
    labels          TEXT NOT NULL DEFAULT '{}',
    admin_labels    TEXT NOT NULL DEFAULT '{}',
    persistent      INTEGER NOT NULL DEFAULT 0,
    local           INTEGER NOT NULL DEFAULT 0,
    current_job_id  TEXT NOT NULL DEFAULT '',
    protocol        INTEGER NOT NULL DEFAULT 0,
    agent_version   TEXT NOT NULL DEFAULT '',
    last_heartbeat  INTEGER,
    connected_at    INTEGER,
    stream_instance TEXT NOT NULL DEFAULT '',
    created_at      INTEGER NOT NULL,
    created_by      TEXT NOT NULL DEFAULT '',
    token_hash      TEXT NOT NULL UNIQUE
) STRICT;
CREATE INDEX workers_by_created ON workers (created_at, id);

CREATE TABLE jobs (
    id              TEXT PRIMARY KEY,
    seq             INTEGER NOT NULL UNIQUE,
    config_name     TEXT NOT NULL DEFAULT '',
    config          TEXT NOT NULL,
    dataloader      TEXT,
    hf_token        TEXT NOT NULL DEFAULT '',
    target          TEXT NOT NULL DEFAULT '',
    worker_labels   TEXT NOT NULL DEFAULT '{}',
    gpu_count       INTEGER NOT NULL DEFAULT 0,
    min_vram_gb     REAL NOT NULL DEFAULT 0,
    priority        INTEGER NOT NULL DEFAULT 0,
    max_retries     INTEGER NOT NULL DEFAULT 0,
    retries_used    INTEGER NOT NULL DEFAULT 0,
    timeout_seconds INTEGER NOT NULL DEFAULT 0,
    status          TEXT NOT NULL,
    attempt         INTEGER NOT NULL DEFAULT 0,
    worker_id       TEXT NOT NULL DEFAULT '',
    error           TEXT NOT NULL DEFAULT '',
    progress        TEXT,
    submitted_by    TEXT NOT NULL DEFAULT '',
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    started_at      INTEGER,
    ended_at        INTEGER,
    ack_deadline    INTEGER,
    cancel_deadline INTEGER
) STRICT;
CREATE INDEX jobs_queue ON jobs (status, priority DESC, seq);
CREATE INDEX jobs_by_worker ON jobs (worker_id) WHERE worker_id <> '';

CREATE TABLE attempts (
    job_id            TEXT NOT NULL REFERENCES jobs (id),
    number            INTEGER NOT NULL,
    worker_id         TEXT NOT NULL,
    upload_token_hash TEXT NOT NULL DEFAULT '',
    dispatched_at     INTEGER NOT NULL,
    acked_at          INTEGER,
    ended_at          INTEGER,
    outcome           TEXT NOT NULL DEFAULT '',
    error             TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (job_id, number)
) STRICT;

CREATE TABLE job_logs (
    job_id   TEXT NOT NULL REFERENCES jobs (id),
    attempt  INTEGER NOT NULL,
    "offset" INTEGER NOT NULL,
    data     BLOB NOT NULL,
    PRIMARY KEY (job_id, attempt, "offset")
) STRICT;

-- How far into each attempt's output the store has accounted for.
CREATE TABLE job_log_attempts (
    job_id  TEXT NOT NULL REFERENCES jobs (id),
    attempt INTEGER NOT NULL,
    size    INTEGER NOT NULL,
    PRIMARY KEY (job_id, attempt)
) STRICT;

-- The job-wide cap: bytes stored over all attempts, and whether it was hit.
CREATE TABLE job_log_state (
    job_id       TEXT PRIMARY KEY REFERENCES jobs (id),
    stored_bytes INTEGER NOT NULL,
    truncated    INTEGER NOT NULL
) STRICT;

-- details is kept exactly as given: the hash covers the exact bytes.
CREATE TABLE audit (
    seq         INTEGER PRIMARY KEY,
    time        INTEGER NOT NULL,
    actor       TEXT NOT NULL,
    actor_ip    TEXT NOT NULL DEFAULT '',
    action      TEXT NOT NULL CHECK (action <> ''),
    target_type TEXT NOT NULL DEFAULT '',
    target_id   TEXT NOT NULL DEFAULT '',
    outcome     TEXT NOT NULL DEFAULT '',
    details     TEXT NOT NULL,
    prev_hash   TEXT NOT NULL,
    hash        TEXT NOT NULL
) STRICT;

-- The chain's last link, moved by every append (one writer at a time).
CREATE TABLE audit_head (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    seq  INTEGER NOT NULL,
    hash TEXT NOT NULL
) STRICT;
INSERT INTO audit_head (id, seq, hash) VALUES (1, 0, 'genesis');

CREATE TABLE admin_tokens (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL DEFAULT '',
    scopes     TEXT NOT NULL DEFAULT '[]',
    hash       TEXT NOT NULL UNIQUE,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
) STRICT;
