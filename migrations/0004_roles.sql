-- The four NOLOGIN groups (cluster-wide, so created only when missing). Their
-- grants are in sql/90_roles.sql, re-applied with the code.
-- depends: 0003_schedules_retries
DO $$
DECLARE r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['scrinalia_reader', 'scrinalia_operator',
                             'scrinalia_runner', 'scrinalia_scheduler']
    LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', r);
            EXCEPTION WHEN duplicate_object OR unique_violation THEN
                NULL;  -- created meanwhile by a migrate of another database
            END;
        END IF;
    END LOOP;
END $$;
