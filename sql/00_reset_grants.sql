-- The code is replaced in place on every migrate (CREATE OR REPLACE, in one
-- transaction with 99_drop_obsolete.sql), so that clients calling it meanwhile never
-- see a function missing. A replaced function keeps its privileges: take back what
-- the groups hold here, and let 85/90 grant exactly what this release says.
-- Every name is qualified: this runs as the owner (often a superuser), see migrate.py.
-- Except the functions 0015 renamed (kept one release, see 99_drop_obsolete.sql): the
-- functions it put in their place call them with the caller's rights, and a call under
-- way in another session as this transaction commits would meet its privilege gone.
DO $$
DECLARE
    g text;
    f text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname OPERATOR(pg_catalog.=) 'scrinalia') THEN
        RETURN;
    END IF;
    FOREACH g IN ARRAY ARRAY['scrinalia_reader', 'scrinalia_operator',
                             'scrinalia_runner', 'scrinalia_scheduler', 'scrinalia_monitor']
    LOOP
        IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) g) THEN
            FOR f IN SELECT p.oid::pg_catalog.regprocedure::pg_catalog.text
                       FROM pg_catalog.pg_proc p
                       JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace
                      WHERE n.nspname OPERATOR(pg_catalog.=) 'scrinalia'
                        AND p.proname NOT LIKE '%\_before\_0015'
            LOOP
                EXECUTE pg_catalog.format('REVOKE ALL ON ROUTINE %s FROM %I', f, g);
            END LOOP;
            EXECUTE pg_catalog.format('REVOKE ALL ON ALL TABLES IN SCHEMA scrinalia FROM %I', g);
            EXECUTE pg_catalog.format('REVOKE ALL ON ALL SEQUENCES IN SCHEMA scrinalia FROM %I', g);
        END IF;
    END LOOP;
END $$;
