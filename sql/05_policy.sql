-- The policy numbers and status sets, each with one home: every function, view and
-- the shim read them here (the table CHECKs in migrations/ restate them as facts).

-- ADR 0015: a scheduled period gets at most three attempts in all.
CREATE FUNCTION scrinalia.max_attempts()
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT 3 $$;

-- The statuses that hold the worker's one slot.
CREATE FUNCTION scrinalia.active_statuses()
RETURNS scrinalia.run_status[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT ARRAY['QUEUED', 'RUNNING']::scrinalia.run_status[] $$;

-- The statuses a run never leaves.
CREATE FUNCTION scrinalia.terminal_statuses()
RETURNS scrinalia.run_status[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT ARRAY['SUCCEEDED', 'FAILED', 'INTERRUPTED', 'CANCELLED']::scrinalia.run_status[] $$;
