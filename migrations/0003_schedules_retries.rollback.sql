-- Refuse rather than delete the SCHEDULE runs silently (migrate.py says the same
-- with the count before rolling anything back): export and delete them first.
DO $$
DECLARE n bigint;
BEGIN
    SELECT pg_catalog.count(*) INTO n FROM scrinalia.archive_worker_runs
     WHERE trigger OPERATOR(pg_catalog.=) 'SCHEDULE';
    IF n OPERATOR(pg_catalog.>) 0 THEN
        RAISE EXCEPTION 'refusing to roll back 0003_schedules_retries: it would delete % SCHEDULE run(s)', n
            USING HINT = 'export them, DELETE FROM scrinalia.archive_worker_runs WHERE trigger = ''SCHEDULE'', then roll back';
    END IF;
END $$;
-- The code in sql/ reads these columns: drop it first; the previous release's
-- migrate re-installs its own.
DO $$
DECLARE r record;
BEGIN
    FOR r IN SELECT p.oid FROM pg_catalog.pg_proc p
             JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
             WHERE n.nspname = 'scrinalia' AND p.prokind IN ('f', 'p')
    LOOP
        -- an earlier DROP ... CASCADE may have taken it (a function returning a view's rows)
        IF EXISTS (SELECT 1 FROM pg_catalog.pg_proc WHERE oid = r.oid) THEN
            EXECUTE pg_catalog.format('DROP FUNCTION %s CASCADE', r.oid::pg_catalog.regprocedure);
        END IF;
    END LOOP;
    FOR r IN SELECT c.oid FROM pg_catalog.pg_class c
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = 'scrinalia' AND c.relkind = 'v'
    LOOP
        IF EXISTS (SELECT 1 FROM pg_catalog.pg_class WHERE oid = r.oid) THEN
            EXECUTE pg_catalog.format('DROP VIEW %s CASCADE', r.oid::pg_catalog.regclass);
        END IF;
    END LOOP;
END $$;
DROP TABLE scrinalia.settings;
DROP TABLE scrinalia.scheduler_state;
DROP TABLE scrinalia.archive_worker_schedules;
ALTER TABLE scrinalia.archive_worker_runs
    DROP COLUMN retry_pending,
    DROP COLUMN scheduled_for,
    DROP COLUMN not_before,
    DROP COLUMN retry_of,
    DROP COLUMN attempt;
