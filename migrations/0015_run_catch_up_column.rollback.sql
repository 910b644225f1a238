-- The catch-ups go back to 0010's table, which the release below reads; the column,
-- and the code that reads it or returns worker_run_v1 (or an array of it), go (the code goes whole after
-- a rollback: the release below re-creates its own with its migrate).
DROP TRIGGER run_catch_up_noted ON scrinalia.archive_run_catch_ups;
DROP FUNCTION scrinalia.run_catch_up_noted();
INSERT INTO scrinalia.archive_run_catch_ups (run_id)
SELECT r.run_id FROM scrinalia.archive_worker_runs r WHERE r.catch_up
    ON CONFLICT DO NOTHING;
DROP FUNCTION IF EXISTS scrinalia.worker_runs(text, integer);
DROP FUNCTION IF EXISTS scrinalia.worker_timeline(text, integer);
DROP VIEW IF EXISTS scrinalia.worker_run_history;
DO $$
DECLARE f record;
BEGIN
    FOR f IN SELECT p.oid::pg_catalog.regprocedure AS fn FROM pg_catalog.pg_proc p
              WHERE p.prorettype OPERATOR(pg_catalog.=) ANY (ARRAY['scrinalia.worker_run_v1'::pg_catalog.regtype,
                                                                  'scrinalia.worker_run_v1[]'::pg_catalog.regtype])
    LOOP
        EXECUTE pg_catalog.format('DROP FUNCTION %s', f.fn);
    END LOOP;
END $$;
ALTER TABLE scrinalia.archive_worker_runs DROP COLUMN catch_up;
DROP TYPE scrinalia.worker_run_v1;
