-- The catch-ups go back to 0010's table, which the release below reads; the column,
-- and the code that reads it or returns worker_run_v1 (or an array of it), go (the code
-- goes whole after a rollback: the release below re-creates its own with its migrate).
-- Two statements, a transaction each, as the migration's two steps: yoyo pairs them in
-- reverse, the first undoing step 2 and the second step 1. After a failed step 2 yoyo
-- runs the second alone: what step 1 put in place then stays, for the daemons of the
-- release below call it, and the next migrate goes on from there.
DO $undo2$
DECLARE f record;
BEGIN
    DROP TRIGGER run_catch_up_noted ON scrinalia.archive_run_catch_ups;
    DROP FUNCTION scrinalia.run_catch_up_noted();
    INSERT INTO scrinalia.archive_run_catch_ups (run_id)
    SELECT r.run_id FROM scrinalia.archive_worker_runs r WHERE r.catch_up
        ON CONFLICT DO NOTHING;
    DROP FUNCTION IF EXISTS scrinalia.worker_runs(text, integer);
    DROP FUNCTION IF EXISTS scrinalia.worker_timeline(text, integer);
    DROP VIEW IF EXISTS scrinalia.worker_run_history;
    FOR f IN SELECT p.oid::pg_catalog.regprocedure AS fn FROM pg_catalog.pg_proc p
              WHERE p.prorettype OPERATOR(pg_catalog.=) ANY (ARRAY['scrinalia.worker_run_v1'::pg_catalog.regtype,
                                                                  'scrinalia.worker_run_v1[]'::pg_catalog.regtype])
    LOOP
        EXECUTE pg_catalog.format('DROP FUNCTION %s', f.fn);
    END LOOP;
    ALTER TABLE scrinalia.archive_worker_runs DROP COLUMN catch_up;
END $undo2$;
DO $undo1$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_proc p
                    WHERE p.prorettype OPERATOR(pg_catalog.=) 'scrinalia.worker_run_v1'::pg_catalog.regtype) THEN
        DROP TYPE scrinalia.worker_run_v1;
    END IF;
END $undo1$;
