-- Webhooks: subscriptions, and the outbox of the events they are sent.

-- A subscription: where events are posted, which, and how. The secret is the
-- HMAC key every request is signed with: the receiver holds it too, so it is
-- kept as given (not hashed) and never handed out after creation. source is
-- "api" or "config" (a [[webhooks]] entry of orchestratord.toml).
CREATE TABLE webhooks (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL UNIQUE,
    url        TEXT NOT NULL,
    team       TEXT NOT NULL DEFAULT '',
    format     TEXT NOT NULL DEFAULT 'json',
    secret     TEXT NOT NULL,
    source     TEXT NOT NULL DEFAULT 'api',
    created_at INTEGER NOT NULL,
    created_by TEXT NOT NULL DEFAULT ''
) STRICT;

-- The events each subscription wants: a name, "*", or a family ("job.*").
CREATE TABLE webhook_filters (
    webhook_id TEXT NOT NULL,
    event      TEXT NOT NULL,
    PRIMARY KEY (webhook_id, event)
) STRICT;
CREATE INDEX webhook_filters_by_event ON webhook_filters (event, webhook_id);

-- Events, written in the transaction of the change they report. seq orders
-- the events of one key (a job, a worker): the key's rows are locked by that
-- transaction, so a later event of a key always gets a higher seq.
CREATE TABLE webhook_events (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    id         TEXT NOT NULL UNIQUE,
    type       TEXT NOT NULL,
    order_key  TEXT NOT NULL,
    team       TEXT NOT NULL DEFAULT '',
    payload    TEXT NOT NULL,
    created_at INTEGER NOT NULL
) STRICT;

CREATE INDEX webhook_events_by_time ON webhook_events (created_at);

-- One delivery per event and subscription wanting it, made with the event.
-- A pending delivery is due at next_at; a sender holds it until lease_until.
-- state: pending, delivered or failed (given up).
CREATE TABLE webhook_deliveries (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    webhook_id  TEXT NOT NULL,
    event_seq   INTEGER NOT NULL,
    order_key   TEXT NOT NULL,
    state       TEXT NOT NULL,
    attempts    INTEGER NOT NULL DEFAULT 0,
    next_at     INTEGER NOT NULL,
    lease_owner TEXT NOT NULL DEFAULT '',
    lease_until INTEGER,
    last_status INTEGER NOT NULL DEFAULT 0,
    last_error  TEXT NOT NULL DEFAULT '',
    created_at  INTEGER NOT NULL,
    ended_at    INTEGER
) STRICT;
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_at, id) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_in_order ON webhook_deliveries (webhook_id, order_key, id) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_by_webhook ON webhook_deliveries (webhook_id, id);
CREATE INDEX webhook_deliveries_by_end ON webhook_deliveries (ended_at) WHERE ended_at IS NOT NULL;
CREATE INDEX webhook_deliveries_by_event ON webhook_deliveries (event_seq);
