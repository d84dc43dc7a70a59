-- Teams share the fleet. An admin token belongs to a team and so do the
-- jobs it submits; '' on a token and 'default' on a job are the team of
-- everything made before teams existed.
ALTER TABLE admin_tokens ADD COLUMN team TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN team TEXT NOT NULL DEFAULT 'default';
-- Set while the job's attempt is being preempted: what preempted it and
-- why. The attempt then ends "preempted" and the job goes back to the queue.
ALTER TABLE jobs ADD COLUMN preempted_by TEXT NOT NULL DEFAULT '';
-- The index that reads one team's queue (jobs_team_queue) is not made
-- here: it costs every job's writes, so the orchestrator makes it the first
-- time several teams are configured (EnsureTeamQueueIndex).
-- GPU-seconds of ended attempts per team and UTC day (YYYY-MM-DD), added
-- in the transaction that ends each attempt. Kept apart from the jobs, so
-- retention does not erase a team's usage.
CREATE TABLE team_usage (
    team        TEXT NOT NULL,
    day         TEXT NOT NULL,
    gpu_seconds double precision NOT NULL DEFAULT 0,
    PRIMARY KEY (team, day)
);
