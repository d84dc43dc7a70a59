-- What a protocol-2 worker reports about itself at registration.
ALTER TABLE workers ADD COLUMN capabilities jsonb NOT NULL DEFAULT '{}';
