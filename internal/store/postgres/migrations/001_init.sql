-- Initial schema. Times are timestamptz (UTC, microseconds). JSON the store
-- hands back byte for byte (configs, GPU info, progress) is json, which keeps
-- the text as given; label maps and scopes are jsonb. Jobs keep worker ids as
-- plain text: deleting a worker keeps the history of what it ran.

CREATE TABLE workers (
    id              text PRIMARY KEY,
    name            text NOT NULL DEFAULT '',
    type            text NOT NULL DEFAULT '',
    status          text NOT NULL DEFAULT '',
    gpu_info        json NOT NULL DEFAULT '{}',
    provider        text NOT NULL DEFAULT '',
    labels          jsonb NOT NULL DEFAULT '{}',
    admin_labels    jsonb NOT NULL DEFAULT '{}',
    persistent      boolean NOT NULL DEFAULT false,
    local           boolean NOT NULL DEFAULT false,
    current_job_id  text NOT NULL DEFAULT '',
    protocol        integer NOT NULL DEFAULT 0,
    agent_version   text NOT NULL DEFAULT '',
    last_heartbeat  timestamptz,
    connected_at    timestamptz,
    stream_instance text NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL,
    created_by      text NOT NULL DEFAULT '',
    token_hash      text NOT NULL UNIQUE
);
CREATE INDEX workers_by_created ON workers (created_at, id);

CREATE TABLE jobs (
    id              text PRIMARY KEY,
    seq             bigserial NOT NULL UNIQUE,
    config_name     text NOT NULL DEFAULT '',
    config          json NOT NULL,
    dataloader      json,
    hf_token        text NOT NULL DEFAULT '',
    target          text NOT NULL DEFAULT '',
    worker_labels   jsonb NOT NULL DEFAULT '{}',
    gpu_count       integer NOT NULL DEFAULT 0,
    min_vram_gb     double precision NOT NULL DEFAULT 0,
    priority        integer NOT NULL DEFAULT 0,
    max_retries     integer NOT NULL DEFAULT 0,
    retries_used    integer NOT NULL DEFAULT 0,
    timeout_seconds integer NOT NULL DEFAULT 0,
    status          text NOT NULL,
    attempt         integer NOT NULL DEFAULT 0,
    worker_id       text NOT NULL DEFAULT '',
    error           text NOT NULL DEFAULT '',
    progress        json,
    submitted_by    text NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    started_at      timestamptz,
    ended_at        timestamptz,
    ack_deadline    timestamptz,
    cancel_deadline timestamptz
);
CREATE INDEX jobs_queue ON jobs (status, priority DESC, seq);
CREATE INDEX jobs_by_worker ON jobs (worker_id) WHERE worker_id <> '';

CREATE TABLE attempts (
    job_id            text NOT NULL REFERENCES jobs (id),
    number            integer NOT NULL,
    worker_id         text NOT NULL,
    upload_token_hash text NOT NULL DEFAULT '',
    dispatched_at     timestamptz NOT NULL,
    acked_at          timestamptz,
    ended_at          timestamptz,
    outcome           text NOT NULL DEFAULT '',
    error             text NOT NULL DEFAULT '',
    PRIMARY KEY (job_id, number)
);

CREATE TABLE job_logs (
    job_id   text NOT NULL REFERENCES jobs (id),
    attempt  integer NOT NULL,
    "offset" bigint NOT NULL,
    data     bytea NOT NULL,
    PRIMARY KEY (job_id, attempt, "offset")
);

-- How far into each attempt's output the store has accounted for.
CREATE TABLE job_log_attempts (
    job_id  text NOT NULL REFERENCES jobs (id),
    attempt integer NOT NULL,
    size    bigint NOT NULL,
    PRIMARY KEY (job_id, attempt)
);

-- The job-wide cap: bytes stored over all attempts, and whether it was hit.
CREATE TABLE job_log_state (
    job_id       text PRIMARY KEY REFERENCES jobs (id),
    stored_bytes bigint NOT NULL,
    truncated    boolean NOT NULL
);

-- details is text, not json: the hash covers the exact bytes.
CREATE TABLE audit (
    seq         bigint PRIMARY KEY,
    time        timestamptz NOT NULL,
    actor       text NOT NULL,
    actor_ip    text NOT NULL DEFAULT '',
    action      text NOT NULL CHECK (action <> ''),
    target_type text NOT NULL DEFAULT '',
    target_id   text NOT NULL DEFAULT '',
    outcome     text NOT NULL DEFAULT '',
    details     text NOT NULL,
    prev_hash   text NOT NULL,
    hash        text NOT NULL
);

-- The chain's last link; locking this row serializes appends.
CREATE TABLE audit_head (
    id   integer PRIMARY KEY CHECK (id = 1),
    seq  bigint NOT NULL,
    hash text NOT NULL
);
INSERT INTO audit_head (id, seq, hash) VALUES (1, 0, 'genesis');

CREATE TABLE admin_tokens (
    id         text PRIMARY KEY,
    name       text NOT NULL DEFAULT '',
    scopes     jsonb NOT NULL DEFAULT '[]',
    hash       text NOT NULL UNIQUE,
    created_at timestamptz NOT NULL,
    revoked_at timestamptz
);
