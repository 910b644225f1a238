-- The code (functions, views, triggers, grants) is replaced whole on every migrate:
-- drop what the previous release installed so that renamed or removed functions
-- do not linger. Tables and their data are the migrations' business, not this file's.
-- Every name is qualified: this runs as the owner (often a superuser), see migrate.py.
DO $$
DECLARE r record;
BEGIN
    FOR r IN SELECT c.oid::pg_catalog.regclass AS v FROM pg_catalog.pg_class c
             JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
             WHERE n.nspname OPERATOR(pg_catalog.=) 'scrinalia' AND c.relkind OPERATOR(pg_catalog.=) 'v'
    LOOP
        EXECUTE pg_catalog.format('DROP VIEW IF EXISTS %s CASCADE', r.v::pg_catalog.text);
    END LOOP;
    FOR r IN SELECT p.oid::pg_catalog.regprocedure AS fn FROM pg_catalog.pg_proc p
             JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace
             WHERE n.nspname OPERATOR(pg_catalog.=) 'scrinalia' AND p.prokind OPERATOR(pg_catalog.=) ANY ('{f,p}')
    LOOP
        EXECUTE pg_catalog.format('DROP FUNCTION IF EXISTS %s CASCADE', r.fn::pg_catalog.text);
    END LOOP;
END $$;
