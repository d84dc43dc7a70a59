-- The workerd installation that holds the worker's session (an id kept in
-- its state directory). A second workerd using the same token from another
-- installation is refused while this one is alive.
ALTER TABLE workers ADD COLUMN session TEXT NOT NULL DEFAULT '';
