"""The start-up check: refuse to run against a schema this code was not written for.

Uses only catalog queries and scrinalia.schema_head(), which every scrinalia group
may call: the scheduler's role has no more than USAGE on the schema.
"""

from __future__ import annotations

import psycopg

from .errors import ConfigError, DatabaseUnavailable, MissingPrivilege, SchemaMismatch

EXPECTED_HEAD = "0005_health"
REQUIRED_COLUMNS = ("attempt", "retry_of", "not_before", "scheduled_for")
_FIX = "run `scrinalia-workers migrate`"


def check_schema(conn: psycopg.Connection) -> str:
    """Returns the head, or raises SchemaMismatch with a one-line message."""
    try:
        with conn.transaction():
            head = conn.execute("SELECT scrinalia.schema_head()").fetchone()[0]
    except psycopg.errors.UndefinedFunction:
        head = None
    except psycopg.errors.InvalidSchemaName:
        raise SchemaMismatch(f"the database has no scrinalia schema, this scrinalia-workers "
                             f"needs {EXPECTED_HEAD}: {_FIX}") from None
    except psycopg.errors.InsufficientPrivilege as e:
        raise SchemaMismatch(f"cannot read the schema head ({e.diag.message_primary}): "
                             "grant this login a scrinalia_* role") from None
    if head != EXPECTED_HEAD:
        raise SchemaMismatch(f"database schema is at {head or 'an unknown version (no schema_head())'}, "
                             f"this scrinalia-workers needs {EXPECTED_HEAD}: {_FIX}")
    cols = {r[0] for r in conn.execute(
        "SELECT a.attname FROM pg_catalog.pg_attribute a"
        " WHERE a.attrelid = to_regclass('scrinalia.archive_worker_runs')"
        " AND a.attnum > 0 AND NOT a.attisdropped")}
    missing = [c for c in REQUIRED_COLUMNS if c not in cols]
    if missing:
        raise SchemaMismatch(f"database schema is at {head} but archive_worker_runs lacks "
                             f"{', '.join(missing)}; this scrinalia-workers needs {EXPECTED_HEAD}: {_FIX}")
    has_enum = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_enum e"
        " JOIN pg_catalog.pg_type t ON t.oid = e.enumtypid"
        " JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace"
        " WHERE n.nspname = 'scrinalia' AND t.typname = 'run_trigger' AND e.enumlabel = 'SCHEDULE')"
    ).fetchone()[0]
    if not has_enum:
        raise SchemaMismatch(f"database schema is at {head} but run_trigger lacks SCHEDULE; "
                             f"this scrinalia-workers needs {EXPECTED_HEAD}: {_FIX}")
    return head


def check_privileges(conn: psycopg.Connection, functions: tuple[str, ...], job: str, groups: str) -> None:
    """Raises MissingPrivilege naming what this login lacks to call `functions`
    (regprocedure signatures) for `job`, and the groups that grant it."""
    missing = [f for f in functions if not conn.execute(
        "SELECT has_function_privilege(current_user, %s, 'EXECUTE')", (f,)).fetchone()[0]]
    if missing:
        user = conn.execute("SELECT current_user").fetchone()[0]
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise MissingPrivilege(f"login {user!r} cannot {job}: no EXECUTE on {shown}; "
                               f"grant it {groups} (GRANT scrinalia_... TO {user})")


def preflight(dsn: str | None, application_name: str, *, functions: tuple[str, ...] = (),
              job: str = "", groups: str = "", server_keepalives: bool = False) -> str:
    """The start-up of a daemon: a configured DSN that reaches a schema at the head, and
    (given `functions`) a login allowed to call every one of them. Anything wrong here
    is misconfiguration: ConfigError, one line, exit 2."""
    from . import db

    dsn = db.require_dsn(dsn)
    try:
        # connect as the daemon will (a pooler may refuse the keepalive options)
        with db.connect(dsn, application_name=application_name, server_keepalives=server_keepalives) as conn:
            check_schema(conn)
            if functions:
                check_privileges(conn, functions, job, groups)
    except DatabaseUnavailable as e:
        raise ConfigError(str(e)) from None
    except psycopg.OperationalError as e:  # the server went away during the check
        raise ConfigError(f"the database closed the connection during the start-up check: {e}") from None
    return dsn
