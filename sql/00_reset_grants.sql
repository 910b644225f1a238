-- The code is replaced in place on every migrate (CREATE OR REPLACE, in one
-- transaction with 99_drop_obsolete.sql), so that clients calling it meanwhile never
-- see a function missing. A replaced function keeps its privileges: take back what
-- the groups hold here, and let 85/90 grant exactly what this release says.
-- Every name is qualified: this runs as the owner (often a superuser), see migrate.py.
DO $$
DECLARE g text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname OPERATOR(pg_catalog.=) 'scrinalia') THEN
        RETURN;
    END IF;
    FOREACH g IN ARRAY ARRAY['scrinalia_reader', 'scrinalia_operator',
                             'scrinalia_runner', 'scrinalia_scheduler', 'scrinalia_monitor']
    LOOP
        IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) g) THEN
            EXECUTE pg_catalog.format('REVOKE ALL ON ALL FUNCTIONS IN SCHEMA scrinalia FROM %I', g);
            EXECUTE pg_catalog.format('REVOKE ALL ON ALL TABLES IN SCHEMA scrinalia FROM %I', g);
            EXECUTE pg_catalog.format('REVOKE ALL ON ALL SEQUENCES IN SCHEMA scrinalia FROM %I', g);
        END IF;
    END LOOP;
END $$;
