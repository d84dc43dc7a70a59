-- Reserved: the GPU-slot migrations of the branch merged beside this one take
-- this number. This placeholder only keeps the versions contiguous on its own
-- branch and is deleted when the branches are merged.
SELECT 1;
