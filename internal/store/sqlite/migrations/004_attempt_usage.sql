-- What an attempt's processes used, reported with its end: CPU seconds and
-- peak memory in bytes. NULL when the worker did not report it.
ALTER TABLE attempts ADD COLUMN cpu_seconds REAL;
ALTER TABLE attempts ADD COLUMN peak_memory_bytes INTEGER;
