"""The statements of admin work: migrate, the cluster-wide groups, the worker catalogue.

Migrate runs as a powerful login under a search path pinned to pg_catalog, so every
operator here is spelled OPERATOR(pg_catalog.=): nothing may resolve to an object another
login planted.
"""

from __future__ import annotations

# Where yoyo keeps what it applied: a schema the migrating login owns.
BOOKKEEPING_SCHEMA = "scrinalia_migrations"
SEARCH_PATH = "pg_catalog, pg_temp"
YOYO_SEARCH_PATH = f"pg_catalog, {BOOKKEEPING_SCHEMA}, pg_temp"
# the two schemas migrate creates and owns
OWN_SCHEMAS = ["scrinalia", BOOKKEEPING_SCHEMA]


def trusted_owner(col: str) -> str:
    """The owner in `col` is this very login, a superuser, or the database owner (not
    merely a role this login is a member of: another member could have acted as it)."""
    return (
        f"({col} OPERATOR(pg_catalog.=) (SELECT r.oid FROM pg_catalog.pg_roles r"
        f"    WHERE r.rolname OPERATOR(pg_catalog.=) current_user)"
        f" OR (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) {col})"
        f" OR {col} OPERATOR(pg_catalog.=) (SELECT d.datdba FROM pg_catalog.pg_database d"
        f"    WHERE d.datname OPERATOR(pg_catalog.=) current_database()))"
    )


# --- the migrate lock -----------------------------------------------------------------

# (classid, objid) of the key: who holds it (pid, usename, application_name, backend_start, client_addr)
MIGRATE_LOCK_HOLDERS = """
        SELECT l.pid, a.usename, a.application_name, a.backend_start, a.client_addr
          FROM pg_catalog.pg_locks l
          LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid OPERATOR(pg_catalog.=) l.pid
         WHERE l.locktype OPERATOR(pg_catalog.=) 'advisory' AND l.granted
           AND l.database OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d
                                                   WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
           AND l.classid::pg_catalog.int8 OPERATOR(pg_catalog.=) %s::pg_catalog.int8
           AND l.objid::pg_catalog.int8 OPERATOR(pg_catalog.=) %s::pg_catalog.int8
           AND l.objsubid OPERATOR(pg_catalog.=) 1"""
TRY_MIGRATE_LOCK = "SELECT pg_catalog.pg_try_advisory_lock(%s::pg_catalog.int8)"
TAKE_MIGRATE_LOCK = "SELECT pg_catalog.pg_advisory_lock(%s::pg_catalog.int8)"

# The sessions but migrate's own with a lock on yoyo's lock table (its name: %s).
YOYO_LOCK_HOLDERS = (
    "SELECT DISTINCT l.pid, a.usename, a.application_name, a.backend_start, a.client_addr"
    "  FROM pg_catalog.pg_locks l"
    "  LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid OPERATOR(pg_catalog.=) l.pid"
    " WHERE l.relation OPERATOR(pg_catalog.=) pg_catalog.to_regclass(%s) AND l.granted"
    "   AND a.application_name OPERATOR(pg_catalog.!~~) 'scrinalia-workers migrate%%'"
)
# The client sessions but ours holding a lock on a relation of the scrinalia schema, in a
# transaction open for longer than %s (an interval): what the code's re-install waits for.
CODE_LOCK_HOLDERS = """
SELECT a.pid, a.usename::pg_catalog.text, a.application_name, a.state,
       pg_catalog.round(pg_catalog.date_part('epoch', pg_catalog.now() OPERATOR(pg_catalog.-) a.xact_start)),
       pg_catalog.string_agg(DISTINCT l.mode OPERATOR(pg_catalog.||) ' on '
                             OPERATOR(pg_catalog.||) l.relation::pg_catalog.regclass::pg_catalog.text, ', ')
  FROM pg_catalog.pg_locks l
  JOIN pg_catalog.pg_stat_activity a ON a.pid OPERATOR(pg_catalog.=) l.pid
 WHERE l.granted AND l.locktype OPERATOR(pg_catalog.=) 'relation'
   AND l.pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid()
   AND l.database OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d
                                           WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
   AND l.relation IN (SELECT c.oid FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n
                          ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
                       WHERE n.nspname OPERATOR(pg_catalog.=) 'scrinalia')
   AND a.xact_start OPERATOR(pg_catalog.<) (pg_catalog.now() OPERATOR(pg_catalog.-) %s::pg_catalog.interval)
 GROUP BY a.pid, a.usename, a.application_name, a.state, a.xact_start
 ORDER BY a.xact_start, a.pid
"""
CLEAR_YOYO_LOCK = f"DELETE FROM {BOOKKEEPING_SCHEMA}.yoyo_lock RETURNING pid, ctime"

# --- checks before changing anything ------------------------------------------------------

# Our schemas (%s: OWN_SCHEMAS) whose owner migrate does not trust: (nspname, owner).
UNTRUSTED_SCHEMA_OWNERS = (
    "SELECT n.nspname::text, pg_catalog.pg_get_userbyid(n.nspowner)::text FROM pg_catalog.pg_namespace n"
    " WHERE n.nspname OPERATOR(pg_catalog.=) ANY (%s::pg_catalog.text[])"
    f" AND NOT {trusted_owner('n.nspowner')}"
)
ME = "SELECT current_user, rolsuper FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) current_user"
THIS_DATABASE = (
    "SELECT current_database(), pg_catalog.pg_get_userbyid(datdba) "
    "FROM pg_catalog.pg_database WHERE datname OPERATOR(pg_catalog.=) current_database()"
)
# Our schemas (%s) this login cannot act as the owner of: (nspname, owner).
FOREIGN_SCHEMA_OWNERS = (
    "SELECT n.nspname::text, pg_catalog.pg_get_userbyid(n.nspowner)::text FROM pg_catalog.pg_namespace n "
    "WHERE n.nspname OPERATOR(pg_catalog.=) ANY (%s::pg_catalog.text[]) "
    "AND NOT pg_catalog.pg_has_role(current_user, n.nspowner, 'USAGE')"
)
PRESENT_SCHEMAS = (
    "SELECT nspname::text FROM pg_catalog.pg_namespace WHERE nspname OPERATOR(pg_catalog.=) ANY (%s::pg_catalog.text[])"
)
MAY_CREATE_SCHEMAS = "SELECT pg_catalog.has_database_privilege(current_database(), 'CREATE')"

# --- yoyo's bookkeeping ---------------------------------------------------------------------

HAS_SCHEMA = "SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname OPERATOR(pg_catalog.=) %s"
CREATE_BOOKKEEPING = f"CREATE SCHEMA {BOOKKEEPING_SCHEMA}"
CLOSE_BOOKKEEPING = f"REVOKE ALL ON SCHEMA {BOOKKEEPING_SCHEMA} FROM PUBLIC"
# The schemas holding a table named %s (yoyo's) that an older release left, owned by a trusted login.
LEGACY_YOYO_SCHEMAS = (
    "SELECT n.nspname::text FROM pg_catalog.pg_class c"
    " JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace"
    " WHERE c.relname OPERATOR(pg_catalog.=) %s AND c.relkind OPERATOR(pg_catalog.=) 'r'"
    " AND n.nspname OPERATOR(pg_catalog.<>) ALL (ARRAY['pg_catalog', 'information_schema', %s])"
    f" AND {trusted_owner('c.relowner')}"
)
# A table (schema %s, name %s): its qualified name and whether a trusted login owns it.
LEGACY_YOYO_TABLE = (
    "SELECT c.oid::pg_catalog.regclass::text, "
    + trusted_owner("c.relowner")
    + " FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n"
    " ON n.oid OPERATOR(pg_catalog.=) c.relnamespace"
    " WHERE n.nspname OPERATOR(pg_catalog.=) %s AND c.relname OPERATOR(pg_catalog.=) %s"
)
YOYO_TABLES_IN_BOOKKEEPING = "SELECT tablename FROM pg_catalog.pg_tables WHERE schemaname = :schema"
REGCLASS = "SELECT to_regclass(%s)"

# --- rollback -----------------------------------------------------------------------------

SCHEDULE_RUNS_AND_SCHEDULES = (
    "SELECT (SELECT count(*) FROM scrinalia.archive_worker_runs"
    "         WHERE trigger OPERATOR(pg_catalog.=) 'SCHEDULE'),"
    "       (SELECT count(*) FROM scrinalia.archive_worker_schedules)"
)

# --- the cluster-wide groups ---------------------------------------------------------------

PINNED_SEARCH_PATH = "SET search_path = pg_catalog, pg_temp"
MISSING_GROUPS = """
SELECT g AS name FROM unnest(%s::text[]) g
 WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = g)
"""
IS_MEMBER = """
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_auth_members m
                 JOIN pg_catalog.pg_roles g ON g.oid = m.roleid
                 JOIN pg_catalog.pg_roles u ON u.oid = m.member
                WHERE u.rolname = %s AND g.rolname = %s)
"""
MY_ROLE_ATTRIBUTES = "SELECT rolcreaterole, rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user"

# --- what was applied ------------------------------------------------------------------------

MIGRATION_TABLE = "_yoyo_migration"  # yoyo's default_migration_table (admin/bookkeeping.py checks)
APPLIED_MIGRATION_IDS = f"SELECT migration_id FROM {BOOKKEEPING_SCHEMA}.{MIGRATION_TABLE}"

# --- the worker catalogue ------------------------------------------------------------------

IS_NEW_WORKER = "SELECT NOT EXISTS (SELECT 1 FROM scrinalia.archive_workers WHERE worker_name = %s)"
REGISTER_WORKER = "SELECT scrinalia.register_worker(%s, %s, %s, %s, %s, %s)"

# --- one login per job (groups logins) -------------------------------------------------------

ROLE_EXISTS = "SELECT 1 FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) %s"
# (groups, login): what an existing login already has that this step would never give it,
# and the scrinalia groups it is in, directly or through another role; no row: no such role
LOGIN_STANDING = """
SELECT r.rolcanlogin, r.rolsuper, r.rolcreaterole, r.rolreplication, r.rolbypassrls,
       ARRAY(SELECT g FROM pg_catalog.unnest(%s::text[]) g
              WHERE EXISTS (SELECT 1 FROM pg_catalog.pg_roles x WHERE x.rolname OPERATOR(pg_catalog.=) g)
                AND pg_catalog.pg_has_role(r.oid, g, 'MEMBER')) AS groups
  FROM pg_catalog.pg_roles r WHERE r.rolname OPERATOR(pg_catalog.=) %s
"""

# --- the release, and what a rollback leaves -------------------------------------------------

# read by sql/70_status.sql in the same transaction: the release installing the code
SET_INSTALLING_RELEASE = "SELECT pg_catalog.set_config('scrinalia.installing_release', %s, true)"
# the schema an earlier release's yoyo creates its tables in: the login's default path's first
CURRENT_SCHEMA = "SELECT pg_catalog.current_schema()"
RESET_SEARCH_PATH = "RESET search_path"
# after a rollback the code of sql/ (written for the head) goes: every view and function
# but the lock key, which a newer scheduler left running needs to reach its schema check
DROP_CODE = """
DO $$
DECLARE r record;
BEGIN
    FOR r IN SELECT c.oid FROM pg_catalog.pg_class c
               JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
              WHERE n.nspname OPERATOR(pg_catalog.=) 'scrinalia' AND c.relkind OPERATOR(pg_catalog.=) 'v'
    LOOP
        IF EXISTS (SELECT 1 FROM pg_catalog.pg_class WHERE oid OPERATOR(pg_catalog.=) r.oid) THEN
            EXECUTE pg_catalog.format('DROP VIEW %s CASCADE', r.oid::pg_catalog.regclass);
        END IF;
    END LOOP;
    FOR r IN SELECT p.oid FROM pg_catalog.pg_proc p
               JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace
              WHERE n.nspname OPERATOR(pg_catalog.=) 'scrinalia' AND p.prokind OPERATOR(pg_catalog.=) ANY ('{f,p}')
                AND p.oid::pg_catalog.regprocedure IS DISTINCT FROM pg_catalog.to_regprocedure('scrinalia.scheduler_lock_key()')
    LOOP
        IF EXISTS (SELECT 1 FROM pg_catalog.pg_proc WHERE oid OPERATOR(pg_catalog.=) r.oid) THEN
            EXECUTE pg_catalog.format('DROP ROUTINE %s CASCADE', r.oid::pg_catalog.regprocedure);
        END IF;
    END LOOP;
END $$
"""

# after apply_code: the grant a standby needs to end a session that keeps the lock, or NULL
TAKEOVER_GRANT_MISSING = "SELECT scrinalia.takeover_grant_missing()"
