-- Artifact uploads authenticate with the attempt's upload token: find the
-- attempt from the token's digest without scanning every attempt ever made.
-- Attempts dispatched before upload tokens existed have '' and stay out.
CREATE INDEX attempts_by_upload_token ON attempts (upload_token_hash) WHERE upload_token_hash <> '';
