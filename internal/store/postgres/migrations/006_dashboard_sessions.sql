-- Dashboard sign-in sessions. The browser's cookie holds a random session id;
-- only its SHA-256 is kept here. A session acts with the admin token it was
-- opened with, so it ends when that token is revoked.
CREATE TABLE dashboard_sessions (
    id_hash    text PRIMARY KEY,
    token_id   text NOT NULL REFERENCES admin_tokens (id),
    created_at timestamptz NOT NULL,
    last_seen  timestamptz NOT NULL,
    peer_ip    text NOT NULL DEFAULT '',
    user_agent text NOT NULL DEFAULT ''
);
CREATE INDEX dashboard_sessions_by_last_seen ON dashboard_sessions (last_seen);

-- Finished jobs by state and end time, for counts over a recent window
-- without reading the whole history.
CREATE INDEX jobs_by_end ON jobs (status, ended_at) WHERE ended_at IS NOT NULL;
