-- The code in sql/ reads these columns: drop it first; the previous release's
-- migrate re-installs its own.
DO $$
DECLARE r record;
BEGIN
    FOR r IN SELECT p.oid::regprocedure AS fn FROM pg_proc p
             JOIN pg_namespace n ON n.oid = p.pronamespace
             WHERE n.nspname = 'scrinalia' AND p.prokind IN ('f', 'p')
    LOOP
        EXECUTE format('DROP FUNCTION %s CASCADE', r.fn);
    END LOOP;
    FOR r IN SELECT c.oid::regclass AS v FROM pg_class c
             JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = 'scrinalia' AND c.relkind = 'v'
    LOOP
        EXECUTE format('DROP VIEW IF EXISTS %s CASCADE', r.v);
    END LOOP;
END $$;
DROP TABLE scrinalia.settings;
DROP TABLE scrinalia.scheduler_state;
DROP TABLE scrinalia.archive_worker_schedules;
DELETE FROM scrinalia.archive_worker_runs WHERE trigger = 'SCHEDULE';
ALTER TABLE scrinalia.archive_worker_runs
    DROP COLUMN retry_pending,
    DROP COLUMN scheduled_for,
    DROP COLUMN not_before,
    DROP COLUMN retry_of,
    DROP COLUMN attempt;
