-- A team member's list of jobs (GET /api/queue behind the walls between
-- teams) reads its teams' jobs in submission order, and counts them. Without
-- this index both read every team's jobs. A job's team and seq never change,
-- so only a job's insert and delete write it, unlike jobs_team_queue.
CREATE INDEX jobs_by_team ON jobs (team, seq);
