-- Revoke what the groups hold in this database. The groups themselves are
-- cluster-wide (other databases may use them) and are not this migration's to drop.
DO $$
DECLARE g text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname OPERATOR(pg_catalog.=) 'scrinalia') THEN
        RETURN;
    END IF;
    FOREACH g IN ARRAY ARRAY['scrinalia_reader', 'scrinalia_operator',
                             'scrinalia_runner', 'scrinalia_scheduler']
    LOOP
        IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) g) THEN
            EXECUTE pg_catalog.format('REVOKE ALL ON SCHEMA scrinalia FROM %I', g);
            EXECUTE pg_catalog.format('REVOKE ALL ON ALL TABLES IN SCHEMA scrinalia FROM %I', g);
            EXECUTE pg_catalog.format('REVOKE ALL ON ALL SEQUENCES IN SCHEMA scrinalia FROM %I', g);
            EXECUTE pg_catalog.format('REVOKE ALL ON ALL FUNCTIONS IN SCHEMA scrinalia FROM %I', g);
        END IF;
    END LOOP;
END $$;
