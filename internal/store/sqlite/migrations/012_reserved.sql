-- Reserved: this version number belongs to a change developed alongside.
-- Migrations must run 1, 2, 3… without gaps, so it holds its place.
SELECT 1;
