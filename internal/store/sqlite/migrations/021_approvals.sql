-- Approval rules hold a job at submit until a lead of its team (or an
-- admin) approves or rejects it. Rules come from the configuration
-- (source 'config', re-synced at start and on reload) or the API ('api');
-- they are checked configuration first, then by position. conditions is
-- the rule's JSON object of conditions, all of which must match.
CREATE TABLE approval_rules (
    id         TEXT PRIMARY KEY,
    position   INTEGER NOT NULL,
    name       TEXT NOT NULL UNIQUE,
    conditions TEXT NOT NULL DEFAULT '{}',
    approver   TEXT NOT NULL DEFAULT 'lead',
    source     TEXT NOT NULL DEFAULT 'api',
    created_at INTEGER NOT NULL,
    created_by TEXT NOT NULL DEFAULT ''
) STRICT;
-- One request per held job, numbered as SimpleTuner numbers its own. The
-- rule's name is kept as it was when the rule matched.
CREATE TABLE approval_requests (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id       TEXT NOT NULL UNIQUE,
    team         TEXT NOT NULL,
    rule_id      TEXT NOT NULL DEFAULT '',
    rule_name    TEXT NOT NULL,
    reason       TEXT NOT NULL,
    gpu_hours    REAL,
    requested_by TEXT NOT NULL,
    approver     TEXT NOT NULL DEFAULT 'lead',
    status       TEXT NOT NULL DEFAULT 'pending',
    reviewed_by  TEXT NOT NULL DEFAULT '',
    reviewed_at  INTEGER,
    review_notes TEXT NOT NULL DEFAULT '',
    created_at   INTEGER NOT NULL
) STRICT;
CREATE INDEX approval_requests_pending ON approval_requests (team, id) WHERE status = 'pending';
-- Jobs each submitter sent per UTC day, bumped with every submit, for the
-- rules on a person's first job and on jobs per day (kept apart from the
-- jobs, which retention deletes).
CREATE TABLE submit_counts (
    actor TEXT NOT NULL,
    day   TEXT NOT NULL,
    n     INTEGER NOT NULL,
    PRIMARY KEY (actor, day)
) STRICT;
