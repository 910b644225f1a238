"""The statements of the daemons' start-up checks: catalog reads any login may run."""

# The schema head the database's SQL code was installed for.
SCHEMA_HEAD = "SELECT scrinalia.schema_head()"

# The columns of the ledger (attname), from the catalogs: any login may read them.
RUN_COLUMNS = (
    "SELECT a.attname FROM pg_catalog.pg_attribute a"
    " WHERE a.attrelid = to_regclass('scrinalia.archive_worker_runs')"
    " AND a.attnum > 0 AND NOT a.attisdropped"
)

# Whether run_trigger has the SCHEDULE value.
HAS_SCHEDULE_TRIGGER = (
    "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_enum e"
    " JOIN pg_catalog.pg_type t ON t.oid = e.enumtypid"
    " JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace"
    " WHERE n.nspname = 'scrinalia' AND t.typname = 'run_trigger' AND e.enumlabel = 'SCHEDULE')"
)

# What this login lacks to call `functions` (signatures as scrinalia's catalog prints them,
# scrinalia's own types unqualified) and whether it is in one of `groups`; catalogs only.
PRIVILEGES = """WITH n AS (SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = 'scrinalia'),
                -- each function asked for, and its oid (NULL: the installed code lacks it)
                f AS (SELECT s.sig, s.i, p.oid
                        FROM unnest(%(functions)s::text[]) WITH ORDINALITY AS s(sig, i)
                        LEFT JOIN pg_catalog.pg_proc p ON p.pronamespace = (SELECT oid FROM n)
                         AND format('%%s(%%s)', p.proname, replace(pg_catalog.oidvectortypes(p.proargtypes),
                                                                   'scrinalia.', '')) = s.sig)
           SELECT current_user AS login,
                  n.oid IS NOT NULL AS has_schema,
                  coalesce(has_schema_privilege(n.oid, 'USAGE'), false) AS usage,
                  EXISTS (SELECT 1 FROM pg_catalog.pg_roles r
                           WHERE r.rolname = ANY (%(groups)s) AND pg_has_role(r.oid, 'MEMBER')) AS member,
                  ARRAY(SELECT 'scrinalia.' || f.sig FROM f
                         WHERE f.oid IS NOT NULL AND NOT has_function_privilege(f.oid, 'EXECUTE')
                         ORDER BY f.i) AS denied,
                  ARRAY(SELECT 'scrinalia.' || f.sig FROM f WHERE f.oid IS NULL ORDER BY f.i) AS missing
             FROM (SELECT 1) one
             LEFT JOIN n ON true"""


def group_problems(groups: str, memberships: str) -> str:
    """What is wrong with the scrinalia groups that exist: (role, problem) rows.

    `groups` and `memberships` are SQL text[] expressions (parameters for the shim, array
    literals in the SQL printed for a DBA): the group names, and the 'member>group' pairs
    expected between them. A group must be NOLOGIN with none of the attributes that
    reach beyond the database, a member of nothing but the groups it is meant to be in,
    and administered only by a superuser or a role with CREATEROLE: anything else could
    turn a login granted the group into more than the group."""
    return f"""
SELECT r.rolname::text AS role, p.problem
  FROM pg_catalog.pg_roles r
 CROSS JOIN LATERAL (
        SELECT a.problem FROM unnest(ARRAY[
            CASE WHEN r.rolcanlogin THEN 'LOGIN' END,
            CASE WHEN r.rolsuper THEN 'SUPERUSER' END,
            CASE WHEN r.rolcreaterole THEN 'CREATEROLE' END,
            CASE WHEN r.rolcreatedb THEN 'CREATEDB' END,
            CASE WHEN r.rolreplication THEN 'REPLICATION' END,
            CASE WHEN r.rolbypassrls THEN 'BYPASSRLS' END]::text[]) AS a(problem)
         WHERE a.problem IS NOT NULL
        UNION ALL
        SELECT 'a member with ADMIN OPTION: ' || m.rolname
          FROM pg_catalog.pg_auth_members am
          JOIN pg_catalog.pg_roles m ON m.oid = am.member
         WHERE am.roleid = r.oid AND am.admin_option AND NOT m.rolsuper AND NOT m.rolcreaterole
        UNION ALL
        SELECT 'a member of ' || g.rolname
          FROM pg_catalog.pg_auth_members am
          JOIN pg_catalog.pg_roles g ON g.oid = am.roleid
         WHERE am.member = r.oid AND r.rolname || '>' || g.rolname <> ALL ({memberships})
       ) p
 WHERE r.rolname = ANY ({groups})
 ORDER BY 1, 2"""


GROUP_PROBLEMS = group_problems("%(groups)s::text[]", "%(memberships)s::text[]")
