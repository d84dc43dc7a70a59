-- People who signed in through an identity provider (LDAP, OpenID
-- Connect), one row per provider identity: the issuer and its stable
-- subject. provider_groups are the provider's groups at the last sign-in, which
-- [[auth.groups]] maps to roles; overrides are the memberships an admin
-- set on top ([{team, role}], NULL when none), kept apart so that a new
-- sign-in never overwrites them.
CREATE TABLE people (
    id           text PRIMARY KEY,
    issuer       text NOT NULL,
    subject      text NOT NULL,
    provider     text NOT NULL,
    username     text NOT NULL DEFAULT '',
    email        text NOT NULL DEFAULT '',
    name         text NOT NULL DEFAULT '',
    provider_groups jsonb NOT NULL DEFAULT '[]',
    overrides    jsonb,
    created_at   timestamptz NOT NULL,
    last_sign_in timestamptz NOT NULL,
    disabled_at  timestamptz,
    UNIQUE (issuer, subject)
);
-- An admin token may belong to a person (their sessions' and their own
-- tokens): disabling the person revokes every one of them, and with them
-- the dashboard sessions that act through them.
ALTER TABLE admin_tokens ADD COLUMN person_id text REFERENCES people (id);
CREATE INDEX admin_tokens_by_person ON admin_tokens (person_id) WHERE person_id IS NOT NULL;
