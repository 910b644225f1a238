-- After the code of this release was created or replaced (same transaction): drop the
-- functions and views of an earlier release that it no longer defines. "Defined by
-- this migrate" is read from the catalog, not from a list kept by hand: CREATE OR
-- REPLACE FUNCTION rewrites the function's pg_depend rows and CREATE OR REPLACE VIEW
-- its pg_rewrite rule, in this transaction; GRANT and REVOKE touch neither. No
-- CASCADE: if current code still depends on something obsolete, migrate fails whole.
DO $$
DECLARE
    r record;
    me pg_catalog.xid := pg_catalog.xid(pg_catalog.pg_current_xact_id());
BEGIN
    FOR r IN SELECT c.oid::pg_catalog.regclass::pg_catalog.text AS v
               FROM pg_catalog.pg_class c
               JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
               JOIN pg_catalog.pg_rewrite w ON w.ev_class OPERATOR(pg_catalog.=) c.oid
              WHERE n.nspname OPERATOR(pg_catalog.=) 'scrinalia' AND c.relkind OPERATOR(pg_catalog.=) 'v'
                AND w.xmin OPERATOR(pg_catalog.<>) me
    LOOP
        RAISE NOTICE 'dropping view % (not defined by this release)', r.v;
        EXECUTE pg_catalog.format('DROP VIEW %s', r.v);
    END LOOP;
    FOR r IN SELECT p.oid::pg_catalog.regprocedure::pg_catalog.text AS fn,
                    CASE p.prokind WHEN 'p' THEN 'PROCEDURE' ELSE 'FUNCTION' END AS kind
               FROM pg_catalog.pg_proc p
               JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace
              WHERE n.nspname OPERATOR(pg_catalog.=) 'scrinalia' AND p.prokind OPERATOR(pg_catalog.=) ANY ('{f,p}')
                -- (what 0015 renamed stays for this release: the functions it put in their
                -- place call them by name, and a call under way in another session as
                -- this transaction commits would meet a function gone. Nothing else
                -- calls them; the next release's migrate drops them.)
                AND p.proname NOT LIKE '%\_before\_0015'
                AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
                                 WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
                                   AND d.objid OPERATOR(pg_catalog.=) p.oid
                                   AND d.xmin OPERATOR(pg_catalog.=) me)
    LOOP
        RAISE NOTICE 'dropping % % (not defined by this release)', pg_catalog.lower(r.kind), r.fn;
        EXECUTE pg_catalog.format('DROP %s %s', r.kind, r.fn);
    END LOOP;
END $$;
