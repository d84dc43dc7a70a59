-- The jobs a job waits for before it joins the queue, one row each, in
-- the order the submit named them. state is '' until the job depended on
-- ends, then 'met' or 'unmet', written in the transaction that ends it;
-- the waiting job moves in that transaction too. hold_unmet: the
-- submitter asked that the job keep waiting, rather than be cancelled,
-- when a dependency can never be met. depends_on has no foreign key: the
-- job depended on may be deleted by retention while its dependents stay.
CREATE TABLE job_dependencies (
    job_id     TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    position   INTEGER NOT NULL,
    depends_on TEXT NOT NULL,
    when_ended TEXT NOT NULL,
    hold_unmet boolean NOT NULL DEFAULT false,
    state      TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (job_id, depends_on)
);
-- The end of a job reads the dependencies on it still pending.
CREATE INDEX job_dependencies_pending ON job_dependencies (depends_on) WHERE state = '';
