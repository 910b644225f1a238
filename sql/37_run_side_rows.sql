-- What is kept beside a run goes with it: its re-run links at either end
-- (archive_run_reruns, 0012, written by rerun()), and the catch-up marks of 0010
-- (archive_run_catch_ups) while there are any, when runs are deleted (prune_runs, the
-- retention, a DBA) and all of them when the ledger is truncated (a run id a restarted
-- sequence gives again must inherit neither). One pair of statement triggers on the
-- ledger serves every side table; a side table to come is one more statement in each.
-- (An earlier install had a pair per table: they go here, their functions with
-- 99_drop_obsolete.sql.)

-- Whether a run is a catch-up is its column catch_up since 0015; only the tick of the
-- code an upgrade replaces (between the migration's transaction and the code's) still
-- writes 0010's table: each mark it inserts is set on its run and removed.
CREATE OR REPLACE FUNCTION scrinalia.run_catch_up_noted()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
BEGIN
    UPDATE scrinalia.archive_worker_runs r SET catch_up = true
      FROM new_rows n WHERE n.run_id = r.run_id AND NOT r.catch_up;
    DELETE FROM scrinalia.archive_run_catch_ups c USING new_rows n WHERE c.run_id = n.run_id;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION scrinalia.run_side_rows_delete_statement()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
BEGIN
    -- (each nearly always empty but for a few rows: no join then)
    IF EXISTS (SELECT FROM scrinalia.archive_run_catch_ups) THEN
        DELETE FROM scrinalia.archive_run_catch_ups c USING old_rows o WHERE c.run_id = o.run_id;
    END IF;
    IF EXISTS (SELECT FROM scrinalia.archive_run_reruns) THEN
        DELETE FROM scrinalia.archive_run_reruns l USING old_rows o WHERE l.run_id = o.run_id;
        DELETE FROM scrinalia.archive_run_reruns l USING old_rows o WHERE l.rerun_of = o.run_id;
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION scrinalia.run_side_rows_truncate_statement()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
BEGIN
    TRUNCATE scrinalia.archive_run_catch_ups, scrinalia.archive_run_reruns;
    RETURN NULL;
END $$;

DO $$
BEGIN
    DROP TRIGGER IF EXISTS run_catch_ups_delete ON scrinalia.archive_worker_runs;
    DROP TRIGGER IF EXISTS run_catch_ups_truncate ON scrinalia.archive_worker_runs;
    DROP TRIGGER IF EXISTS run_reruns_delete ON scrinalia.archive_worker_runs;
    DROP TRIGGER IF EXISTS run_reruns_truncate ON scrinalia.archive_worker_runs;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger
                    WHERE tgrelid = 'scrinalia.archive_worker_runs'::pg_catalog.regclass
                      AND tgname = 'run_side_rows_delete') THEN
        CREATE TRIGGER run_side_rows_delete AFTER DELETE ON scrinalia.archive_worker_runs
            REFERENCING OLD TABLE AS old_rows
            FOR EACH STATEMENT EXECUTE FUNCTION scrinalia.run_side_rows_delete_statement();
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger
                    WHERE tgrelid = 'scrinalia.archive_worker_runs'::pg_catalog.regclass
                      AND tgname = 'run_side_rows_truncate') THEN
        CREATE TRIGGER run_side_rows_truncate AFTER TRUNCATE ON scrinalia.archive_worker_runs
            FOR EACH STATEMENT EXECUTE FUNCTION scrinalia.run_side_rows_truncate_statement();
    END IF;
END
$$;
