-- The four NOLOGIN groups are cluster-wide: a privileged login creates them once per
-- cluster (`scrinalia-workers groups create`, see py_shim/scrinalia_workers/groups.py),
-- and migrate checks them before it changes anything. This step only re-checks, so
-- that a plain database owner can migrate. Their grants are in sql/90_roles.sql.
-- depends: 0003_schedules_retries
DO $$
DECLARE gone text;
BEGIN
    SELECT pg_catalog.string_agg(g, ', ') INTO gone
      FROM pg_catalog.unnest(ARRAY['scrinalia_reader', 'scrinalia_operator',
                                   'scrinalia_runner', 'scrinalia_scheduler']) g
     WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname OPERATOR(pg_catalog.=) g);
    IF gone IS NOT NULL THEN
        RAISE EXCEPTION 'the cluster-wide groups % are missing', gone
            USING HINT = 'a login with CREATEROLE runs `scrinalia-workers groups create` once per cluster';
    END IF;
END $$;
