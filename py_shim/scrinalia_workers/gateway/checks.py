"""The start-up check: refuse to run against a schema this code was not written for.

Uses only catalog queries and scrinalia.schema_head(), which every scrinalia group
may call: the scheduler's role has no more than USAGE on the schema.
"""

from __future__ import annotations

import psycopg
from psycopg.rows import dict_row

from scrinalia_workers.errors import (
    ConfigError,
    DatabaseUnavailable,
    MissingPrivilege,
    SchemaMismatch,
)
from scrinalia_workers.logs import one_line
from scrinalia_workers.sqlfiles import head as expected_head
from scrinalia_workers.text import printable

REQUIRED_COLUMNS = ("attempt", "retry_of", "not_before", "scheduled_for")
_FIX = "run `scrinalia-workers migrate`"


def check_schema(conn: psycopg.Connection) -> str:
    """Returns the head, or raises SchemaMismatch with a one-line message."""
    EXPECTED_HEAD = expected_head()
    try:
        with conn.transaction():
            head = conn.execute("SELECT scrinalia.schema_head()").fetchone()[0]
    except psycopg.errors.UndefinedFunction:
        head = None
    except psycopg.errors.InvalidSchemaName:
        raise SchemaMismatch(
            f"the database has no scrinalia schema, this scrinalia-workers needs {EXPECTED_HEAD}: {_FIX}"
        ) from None
    except psycopg.errors.InsufficientPrivilege as e:
        raise SchemaMismatch(
            f"cannot read the schema head ({e.diag.message_primary}): grant this login a scrinalia_* role"
        ) from None
    if head != EXPECTED_HEAD:
        raise SchemaMismatch(
            f"database schema is at {head or 'an unknown version (no schema_head())'}, "
            f"this scrinalia-workers needs {EXPECTED_HEAD}: {_FIX}"
        )
    cols = {
        r[0]
        for r in conn.execute(
            "SELECT a.attname FROM pg_catalog.pg_attribute a"
            " WHERE a.attrelid = to_regclass('scrinalia.archive_worker_runs')"
            " AND a.attnum > 0 AND NOT a.attisdropped"
        )
    }
    missing = [c for c in REQUIRED_COLUMNS if c not in cols]
    if missing:
        raise SchemaMismatch(
            f"database schema is at {head} but archive_worker_runs lacks "
            f"{', '.join(missing)}; this scrinalia-workers needs {EXPECTED_HEAD}: {_FIX}"
        )
    has_enum = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_enum e"
        " JOIN pg_catalog.pg_type t ON t.oid = e.enumtypid"
        " JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace"
        " WHERE n.nspname = 'scrinalia' AND t.typname = 'run_trigger' AND e.enumlabel = 'SCHEDULE')"
    ).fetchone()[0]
    if not has_enum:
        raise SchemaMismatch(
            f"database schema is at {head} but run_trigger lacks SCHEDULE; "
            f"this scrinalia-workers needs {EXPECTED_HEAD}: {_FIX}"
        )
    return head


def check_privileges(conn: psycopg.Connection, functions: tuple[str, ...], job: str, groups: tuple[str, ...]) -> None:
    """MissingPrivilege naming what this login lacks to `job`: USAGE on the schema, or
    EXECUTE on one of `functions` (exact signatures, scrinalia's own types unqualified,
    e.g. "finish(bigint, uuid, run_status, text, text)"), and the group(s) that grant
    it. Reads only the catalogs, readable by any login, so it speaks even to a login
    in no group. A function that does not exist means the database's SQL code is older
    than this package (a release can add functions without a migration): SchemaMismatch."""
    cur = conn.cursor(row_factory=dict_row)
    row = cur.execute(
        """WITH n AS (SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = 'scrinalia'),
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
             LEFT JOIN n ON true""",
        {"groups": list(groups), "functions": list(functions)},
    ).fetchone()
    if not row["has_schema"]:
        return
    if row["missing"]:
        raise SchemaMismatch(
            f"the database's scrinalia SQL code lacks {', '.join(row['missing'][:3])}"
            f"{' and more' if len(row['missing']) > 3 else ''}: it is older than this "
            f"scrinalia-workers: {_FIX}"
        )
    lacks = ([] if row["usage"] else ["USAGE on schema scrinalia"]) + [f"EXECUTE on {f}" for f in row["denied"]]
    if not lacks:
        return
    login = printable(row["login"])
    shown = ", ".join(lacks[:3]) + (f" and {len(lacks) - 3} more" if len(lacks) > 3 else "")
    if row["member"]:
        raise MissingPrivilege(
            f"login {login} is in {' or '.join(groups)} but lacks {shown}: the group's "
            "grants are incomplete (sql/90_roles.sql; run `scrinalia-workers migrate`)"
        )
    raise MissingPrivilege(
        f"login {login} cannot {job}: it is not in {' or '.join(groups)} and lacks "
        f"{shown}: GRANT {groups[0]} TO {login}"
    )


def preflight(
    dsn: str | None,
    application_name: str,
    *,
    functions: tuple[str, ...] = (),
    job: str = "",
    groups: tuple[str, ...] = (),
    server_keepalives: bool = False,
) -> str:
    """The start-up of a daemon: a configured DSN that reaches a schema at the head, and
    (given `functions`) a login allowed to call every one of them. Anything wrong here
    is misconfiguration: ConfigError, one line, exit 2."""
    from scrinalia_workers.gateway import connection as db

    dsn = db.require_dsn(dsn)
    try:
        # connect as the daemon will (a pooler may refuse the keepalive options)
        with db.connect(dsn, application_name=application_name, server_keepalives=server_keepalives) as conn:
            if functions:
                check_privileges(conn, functions, job, groups)
            check_schema(conn)
    except DatabaseUnavailable as e:
        raise ConfigError(str(e)) from None
    except psycopg.OperationalError as e:  # the server went away during the check
        raise ConfigError(f"the database closed the connection during the start-up check: {one_line(e)}") from None
    return dsn
