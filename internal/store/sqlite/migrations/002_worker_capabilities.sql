-- What a protocol-2 worker reports about itself at registration (JSON object).
ALTER TABLE workers ADD COLUMN capabilities TEXT NOT NULL DEFAULT '{}';
