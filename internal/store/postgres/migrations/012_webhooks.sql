-- Webhooks: subscriptions, and the outbox of the events they are sent.

-- A subscription: where events are posted, which, and how. The secret is the
-- HMAC key every request is signed with: the receiver holds it too, so it is
-- kept as given (not hashed) and never handed out after creation. source is
-- "api" or "config" (a [[webhooks]] entry of orchestratord.toml).
CREATE TABLE webhooks (
    id         text PRIMARY KEY,
    name       text NOT NULL UNIQUE,
    url        text NOT NULL,
    team       text NOT NULL DEFAULT '',
    format     text NOT NULL DEFAULT 'json',
    secret     text NOT NULL,
    source     text NOT NULL DEFAULT 'api',
    created_at timestamptz NOT NULL,
    created_by text NOT NULL DEFAULT ''
);

-- The events each subscription wants: a name, "*", or a family ("job.*").
CREATE TABLE webhook_filters (
    webhook_id text NOT NULL,
    event      text NOT NULL,
    PRIMARY KEY (webhook_id, event)
);
CREATE INDEX webhook_filters_by_event ON webhook_filters (event, webhook_id);

-- Events, written in the transaction of the change they report. seq orders
-- the events of one key (a job, a worker): the key's rows are locked by that
-- transaction, so a later event of a key always gets a higher seq.
CREATE TABLE webhook_events (
    seq        bigserial PRIMARY KEY,
    id         text NOT NULL UNIQUE,
    type       text NOT NULL,
    order_key  text NOT NULL,
    team       text NOT NULL DEFAULT '',
    payload    text NOT NULL,
    created_at timestamptz NOT NULL
);

CREATE INDEX webhook_events_by_time ON webhook_events (created_at);

-- One delivery per event and subscription wanting it, made with the event.
-- A pending delivery is due at next_at; a sender holds it until lease_until.
-- state: pending, delivered or failed (given up).
CREATE TABLE webhook_deliveries (
    id          bigserial PRIMARY KEY,
    webhook_id  text NOT NULL,
    event_seq   bigint NOT NULL,
    order_key   text NOT NULL,
    state       text NOT NULL,
    attempts    integer NOT NULL DEFAULT 0,
    next_at     timestamptz NOT NULL,
    lease_owner text NOT NULL DEFAULT '',
    lease_until timestamptz,
    last_status integer NOT NULL DEFAULT 0,
    last_error  text NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL,
    ended_at    timestamptz
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_at, id) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_in_order ON webhook_deliveries (webhook_id, order_key, id) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_by_webhook ON webhook_deliveries (webhook_id, id);
CREATE INDEX webhook_deliveries_by_end ON webhook_deliveries (ended_at) WHERE ended_at IS NOT NULL;
CREATE INDEX webhook_deliveries_by_event ON webhook_deliveries (event_seq);
