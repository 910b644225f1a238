-- What the shim checks at start-up, and what an operator reads to know whether the
-- scheduler is alive.

-- The migration this code was written for: the shim refuses to run when it differs
-- from the one it expects, and checks the ADR 0015 columns and enum value itself.
CREATE FUNCTION scrinalia.schema_head()
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT '0004_roles'::text $$;

-- Who holds the one-scheduler lock now, and when the last tick ran.
CREATE FUNCTION scrinalia.scheduler_status()
RETURNS TABLE (lock_held boolean, holder_pid integer, holder_application text, holder_client inet,
               holder_backend_start timestamptz, last_tick_at timestamptz, last_tick_by text, ticks bigint)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
    SELECT l.pid IS NOT NULL, l.pid, a.application_name, a.client_addr, a.backend_start,
           st.last_tick_at, st.last_tick_by, st.ticks
      FROM scrinalia.scheduler_state st
      LEFT JOIN pg_catalog.pg_locks l
             ON l.locktype = 'advisory' AND l.granted AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
            AND ((l.classid::bigint << 32) | l.objid::bigint) = scrinalia.scheduler_lock_key()
            AND l.objsubid = 1
      LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
$$;
