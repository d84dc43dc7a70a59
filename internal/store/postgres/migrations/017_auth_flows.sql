-- Sign-ins in progress: a browser sent to an identity provider comes back
-- with the state it was given, perhaps to another orchestrator behind the
-- same load balancer. Only the state's SHA-256 is kept; a row is taken
-- (deleted) once, so a state cannot finish two sign-ins.
CREATE TABLE auth_flows (
    state_hash text PRIMARY KEY,
    provider   text NOT NULL,
    nonce      text NOT NULL,
    verifier   text NOT NULL,
    return_to  text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE INDEX auth_flows_by_expiry ON auth_flows (expires_at);
