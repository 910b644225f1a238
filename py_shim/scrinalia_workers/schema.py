"""The start-up check: refuse to run against a schema this code was not written for.

Uses only catalog queries and scrinalia.schema_head(), which every scrinalia group
may call: the scheduler's role has no more than USAGE on the schema.
"""

from __future__ import annotations

import psycopg

from .errors import SchemaMismatch

EXPECTED_HEAD = "0004_roles"
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


def preflight(dsn: str | None, application_name: str) -> str:
    """The start-up of a daemon: a configured DSN that reaches a schema at the head."""
    from . import db

    dsn = db.require_dsn(dsn)
    with db.connect(dsn, application_name=application_name) as conn:
        check_schema(conn)
    return dsn
