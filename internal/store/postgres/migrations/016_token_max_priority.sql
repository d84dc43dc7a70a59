-- The highest priority a token's jobs may be submitted with, set by the
-- admin who created it; NULL leaves the token its team's max_priority.
ALTER TABLE admin_tokens ADD COLUMN max_priority INTEGER;
