-- The worker's queue of units: what the pending/processed counters count. Kept apart
-- from the agenda: nothing in the schedules, the tick or the retries touches it.

CREATE OR REPLACE FUNCTION scrinalia.add_units(p_worker_name text, p_unit_keys text[])
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
DECLARE n integer;
BEGIN
    PERFORM scrinalia.require_worker(p_worker_name);
    INSERT INTO scrinalia.archive_worker_units (worker_name, unit_key)
    SELECT p_worker_name, k FROM unnest(p_unit_keys) k WHERE k IS NOT NULL
    ON CONFLICT (worker_name, unit_key) DO NOTHING;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END $$;

CREATE OR REPLACE FUNCTION scrinalia.mark_units_processed(p_worker_name text, p_unit_keys text[])
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
DECLARE n integer;
BEGIN
    PERFORM scrinalia.require_worker(p_worker_name);
    UPDATE scrinalia.archive_worker_units
       SET processed_at = now()
     WHERE worker_name = p_worker_name AND unit_key = ANY (p_unit_keys) AND processed_at IS NULL;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END $$;
