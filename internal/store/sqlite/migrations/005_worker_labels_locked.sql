-- An admin pinned the worker's labels: what it reports is ignored for placement.
ALTER TABLE workers ADD COLUMN labels_locked INTEGER NOT NULL DEFAULT 0;
