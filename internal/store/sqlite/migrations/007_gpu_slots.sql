-- GPU slots: a worker runs several attempts at once, each on GPUs of its
-- own. A lease is one GPU held by one attempt; the primary key is what keeps
-- two claims (on two orchestrator replicas, say) from handing out one GPU
-- twice. running and gpus_used are kept in the transactions that open and
-- end attempts, for the worker's status.
CREATE TABLE gpu_leases (
	worker_id TEXT NOT NULL,
	gpu_index INTEGER NOT NULL,
	job_id    TEXT NOT NULL,
	attempt   INTEGER NOT NULL,
	PRIMARY KEY (worker_id, gpu_index)
);
CREATE INDEX gpu_leases_by_attempt ON gpu_leases (job_id, attempt);
ALTER TABLE workers ADD COLUMN running INTEGER NOT NULL DEFAULT 0;
ALTER TABLE workers ADD COLUMN gpus_used INTEGER NOT NULL DEFAULT 0;
UPDATE workers SET running = 1 WHERE current_job_id <> '';
-- The GPUs an attempt was given, as comma-separated indices.
ALTER TABLE attempts ADD COLUMN gpus TEXT NOT NULL DEFAULT '';
