-- People who signed in through an identity provider (LDAP, OpenID
-- Connect), one row per provider identity: the issuer and its stable
-- subject. provider_groups are the provider's groups at the last sign-in, which
-- [[auth.groups]] maps to roles; overrides are the memberships an admin
-- set on top ([{team, role}], NULL when none), kept apart so that a new
-- sign-in never overwrites them.
CREATE TABLE people (
    id           TEXT PRIMARY KEY,
    issuer       TEXT NOT NULL,
    subject      TEXT NOT NULL,
    provider     TEXT NOT NULL,
    username     TEXT NOT NULL DEFAULT '',
    email        TEXT NOT NULL DEFAULT '',
    name         TEXT NOT NULL DEFAULT '',
    provider_groups TEXT NOT NULL DEFAULT '[]',
    overrides    TEXT,
    created_at   INTEGER NOT NULL,
    last_sign_in INTEGER NOT NULL,
    disabled_at  INTEGER,
    UNIQUE (issuer, subject)
) STRICT;
-- An admin token may belong to a person (their sessions' and their own
-- tokens): disabling the person revokes every one of them, and with them
-- the dashboard sessions that act through them.
ALTER TABLE admin_tokens ADD COLUMN person_id TEXT REFERENCES people (id);
CREATE INDEX admin_tokens_by_person ON admin_tokens (person_id) WHERE person_id IS NOT NULL;
