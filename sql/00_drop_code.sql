-- The code (functions, views, triggers, grants) is replaced whole on every migrate:
-- drop what the previous release installed so that renamed or removed functions
-- do not linger. Tables and their data are the migrations' business, not this file's.
DO $$
DECLARE r record;
BEGIN
    FOR r IN SELECT c.oid::regclass AS v FROM pg_class c
             JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = 'scrinalia' AND c.relkind = 'v'
    LOOP
        EXECUTE format('DROP VIEW IF EXISTS %s CASCADE', r.v);
    END LOOP;
    FOR r IN SELECT p.oid::regprocedure AS fn FROM pg_proc p
             JOIN pg_namespace n ON n.oid = p.pronamespace
             WHERE n.nspname = 'scrinalia' AND p.prokind IN ('f', 'p')
    LOOP
        EXECUTE format('DROP FUNCTION IF EXISTS %s CASCADE', r.fn);
    END LOOP;
END $$;
