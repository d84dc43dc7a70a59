-- Reserved: the number of a migration of work developed beside this one.
-- This file holds the place so that versions run without gaps and is
-- replaced by that migration when the work is merged.
SELECT 1;
