"""The start-up check: refuse to run against a schema older (or newer) than this code."""

from __future__ import annotations

import psycopg

from .errors import SchemaMismatch

EXPECTED_HEAD = "0004_roles"

# What ADR 0015 added, checked in the catalog so that any of the four roles can ask.
_ADR_0015 = """
SELECT (SELECT count(*) FROM pg_catalog.pg_attribute
         WHERE attrelid = 'scrinalia.archive_worker_runs'::regclass AND NOT attisdropped
           AND attname IN ('attempt', 'retry_of', 'not_before', 'scheduled_for', 'retry_pending')) = 5,
       EXISTS (SELECT 1 FROM pg_catalog.pg_enum
                WHERE enumtypid = 'scrinalia.run_trigger'::regtype AND enumlabel = 'SCHEDULE')
"""

_HINT = "run `scrinalia-workers migrate` with the owner's credentials"


def check_schema(conn: psycopg.Connection) -> str:
    """Returns the schema head; raises SchemaMismatch with what to do about it."""
    try:
        with conn.transaction():
            head = conn.execute("SELECT scrinalia.schema_head()").fetchone()[0]
            columns_ok, enum_ok = conn.execute(_ADR_0015).fetchone()
    except psycopg.errors.InsufficientPrivilege as e:
        raise SchemaMismatch(
            f"cannot read the scrinalia schema as this user ({e.diag.message_primary}): "
            "grant it one of the scrinalia_* groups"
        ) from None
    except (psycopg.errors.UndefinedFunction, psycopg.errors.InvalidSchemaName,
            psycopg.errors.UndefinedTable, psycopg.errors.UndefinedObject):
        raise SchemaMismatch(
            f"the database has no scrinalia schema, or an old one: this scrinalia-workers "
            f"needs {EXPECTED_HEAD}; {_HINT}"
        ) from None
    if head != EXPECTED_HEAD:
        raise SchemaMismatch(
            f"the database schema is at {head}, this scrinalia-workers needs {EXPECTED_HEAD}; {_HINT}"
        )
    if not (columns_ok and enum_ok):
        raise SchemaMismatch(
            "the database lacks the ADR 0015 columns or the SCHEDULE trigger although its "
            f"code says {head}; {_HINT}"
        )
    return head
