-- A team member's list of jobs (GET /api/queue behind the walls between
-- teams) reads its teams' jobs in submission order, and counts them. Without
-- this index both read every team's jobs. A job's team and seq never change,
-- but an update that changes another indexed column (status does) writes a
-- new entry in every index of the table, this one too.
CREATE INDEX jobs_by_team ON jobs (team, seq);
