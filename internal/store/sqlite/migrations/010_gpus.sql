-- GPUs as a job and a worker see them.

-- A job submitted without a GPU count and whose config names none takes the
-- whole worker: all its GPUs, alone.
ALTER TABLE jobs ADD COLUMN whole_worker INTEGER NOT NULL DEFAULT 0;
-- An attempt holds the worker whole: nothing else starts there until it ends.
-- Kept in the transactions that open and end attempts, like running.
ALTER TABLE workers ADD COLUMN held_whole INTEGER NOT NULL DEFAULT 0;
-- GPUs the worker keeps out of use, as it last reported them (a JSON list:
-- held back because a job left something on it, or unhealthy after a
-- hardware fault), and the unhealthy ones an admin cleared that the worker
-- has not yet confirmed.
ALTER TABLE workers ADD COLUMN gpu_conditions TEXT NOT NULL DEFAULT '[]';
ALTER TABLE workers ADD COLUMN gpu_clears TEXT NOT NULL DEFAULT '[]';
-- What an attempt used of its GPUs, reported with its end: GPU-seconds (GPUs
-- held × wall time), the peak GPU memory of its processes, the mean
-- utilisation of its GPUs, and the GPU errors the driver raised while it ran
-- (a JSON list). NULL when the worker did not report it.
ALTER TABLE attempts ADD COLUMN gpu_seconds REAL;
ALTER TABLE attempts ADD COLUMN peak_gpu_memory_bytes INTEGER;
ALTER TABLE attempts ADD COLUMN gpu_utilization_pct REAL;
ALTER TABLE attempts ADD COLUMN gpu_events TEXT;
