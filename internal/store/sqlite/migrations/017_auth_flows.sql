-- Sign-ins in progress: a browser sent to an identity provider comes back
-- with the state it was given, perhaps to another orchestrator behind the
-- same load balancer. Only the state's SHA-256 is kept; a row is taken
-- (deleted) once, so a state cannot finish two sign-ins.
CREATE TABLE auth_flows (
    state_hash TEXT PRIMARY KEY,
    provider   TEXT NOT NULL,
    nonce      TEXT NOT NULL,
    verifier   TEXT NOT NULL,
    return_to  TEXT NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
) STRICT;
CREATE INDEX auth_flows_by_expiry ON auth_flows (expires_at);
