-- A token may expire: a person's command-line login lasts hours, their
-- own tokens at most what the admin allows. NULL never expires (service
-- tokens, and every token made before this).
ALTER TABLE admin_tokens ADD COLUMN expires_at INTEGER;
