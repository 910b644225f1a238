"""yoyo's bookkeeping: its backend pinned to our search path and schema, and the move of
an older release's yoyo tables into that schema.

yoyo's tables live in BOOKKEEPING_SCHEMA, a schema the migrating login owns, never in
`public`, where another login could plant a table of the same name.
"""

from __future__ import annotations

import logging

import psycopg
from psycopg import sql as psql
from yoyo.backends.core.postgresql import PostgresqlPsycopgBackend
from yoyo.connections import default_migration_table, parse_uri

from scrinalia_workers.errors import ConfigError
from scrinalia_workers.gateway.connection import one
from scrinalia_workers.gateway.statements import admin as sql

log = logging.getLogger("scrinalia_workers.migrate")

BOOKKEEPING_SCHEMA = sql.BOOKKEEPING_SCHEMA
YOYO_TABLES = ("_yoyo_migration", "_yoyo_log", "_yoyo_version", "yoyo_lock")
assert default_migration_table == sql.MIGRATION_TABLE, "yoyo renamed its migration table"


def resolved_conninfo(conn: psycopg.Connection) -> str:
    """The parameters our connection actually used (from --dsn, DATABASE_URL, the PG*
    variables, a service file or .pgpass alike), pinned to the host it reached: yoyo's
    connections go to the same server and database, whatever the DSN spelled."""
    params = dict(conn.info.get_parameters())
    params.update(host=conn.info.host, port=str(conn.info.port), application_name="scrinalia-workers migrate (yoyo)")
    hostaddr = getattr(conn.info, "hostaddr", None)
    if hostaddr:
        params["hostaddr"] = hostaddr
    params.pop("service", None)  # everything it held is resolved above; a second read could differ
    if conn.info.password:
        params["password"] = conn.info.password
    return psycopg.conninfo.make_conninfo("", **params)


class PinnedBackend(PostgresqlPsycopgBackend):
    """yoyo's PostgreSQL backend, connecting with our resolved parameters, under a pinned
    search path, with its tables schema-qualified in BOOKKEEPING_SCHEMA."""

    def __init__(self, conninfo: str):
        self._conninfo = conninfo
        super().__init__(parse_uri("postgresql+psycopg:///scrinalia"), default_migration_table)

    def connect(self, dburi):
        return psycopg.connect(self._conninfo, autocommit=True)

    def init_connection(self, connection):  # after connect and after every rollback
        connection.execute(f"SET search_path = {sql.YOYO_SEARCH_PATH}")

    def copy(self):  # yoyo runs each migration on a copy: same parameters, same pinning
        return PinnedBackend(self._conninfo)

    def _qualified(self, table: str) -> str:
        return f"{self.quote_identifier(BOOKKEEPING_SCHEMA)}.{self.quote_identifier(table)}"

    @property
    def migration_table_quoted(self):
        return self._qualified(self.migration_table)

    @property
    def log_table_quoted(self):
        return self._qualified(self.log_table)

    @property
    def version_table_quoted(self):
        return self._qualified(self.version_table)

    @property
    def lock_table_quoted(self):
        return self._qualified(self.lock_table)

    def list_tables(self, **kwargs):
        return [r[0] for r in self.execute(sql.YOYO_TABLES_IN_BOOKKEEPING, {"schema": BOOKKEEPING_SCHEMA}).fetchall()]

    def _check_transactional_ddl(self):
        # PostgreSQL's DDL is transactional; yoyo's probe would create an unqualified
        # table, which the pinned path sends to pg_catalog.
        return True


def ensure_bookkeeping(conn: psycopg.Connection) -> None:
    """BOOKKEEPING_SCHEMA exists; a database migrated by an older release, whose yoyo
    tables are where its search path put them (usually `public`), has them moved in.
    Tables owned by anybody else (planted by another login) are left alone."""
    with conn.transaction():
        if conn.execute(sql.HAS_SCHEMA, (BOOKKEEPING_SCHEMA,)).fetchone():
            return
        conn.execute(sql.CREATE_BOOKKEEPING)
        conn.execute(sql.CLOSE_BOOKKEEPING)
        legacy = conn.execute(sql.LEGACY_YOYO_SCHEMAS, (default_migration_table, BOOKKEEPING_SCHEMA)).fetchall()
        if not legacy:
            return
        if len(legacy) > 1:
            raise ConfigError(
                f"yoyo's {default_migration_table} table is in several schemas "
                f"({', '.join(r[0] for r in legacy)}): keep the right one, drop the others, migrate again"
            )
        source = legacy[0][0]
        for table in YOYO_TABLES:
            found = conn.execute(sql.LEGACY_YOYO_TABLE, (source, table)).fetchone()
            if found is None:
                continue
            if not found[1]:
                raise ConfigError(
                    f"{found[0]} is owned by a login that did not migrate this "
                    "database: inspect it, drop it, migrate again"
                )
            conn.execute(f"ALTER TABLE {found[0]} SET SCHEMA {BOOKKEEPING_SCHEMA}")
        log.info("moved yoyo's tables from schema %s into %s", source, BOOKKEEPING_SCHEMA)


def applied_ids(conn: psycopg.Connection) -> set[str]:
    """The ids yoyo recorded as applied (none when it never ran here)."""
    if one(conn.execute(sql.REGCLASS, (f"{BOOKKEEPING_SCHEMA}.{default_migration_table}",)))[0] is None:
        return set()
    return {r[0] for r in conn.execute(sql.APPLIED_MIGRATION_IDS)}


# The first migration of the release (0.2.0) that keeps yoyo's tables in
# BOOKKEEPING_SCHEMA: a database rolled back below it is handed to an earlier release,
# whose yoyo looks for them in its login's current schema (usually `public`).
BOOKKEEPING_SINCE = "0005_health"


def legacy_schema(conn: psycopg.Connection) -> str:
    """The schema an earlier release's yoyo uses: the first of this login's default
    search path (our connection's pinned path is set aside for the question)."""
    conn.execute(sql.RESET_SEARCH_PATH)
    try:
        schema = one(conn.execute(sql.CURRENT_SCHEMA))[0]
    finally:
        conn.execute(f"SET search_path = {sql.SEARCH_PATH}")
    if schema is None:
        raise ConfigError(
            "refusing to roll back below the bookkeeping of 0.2.0: this login's search path names no "
            "existing schema for an earlier release's yoyo tables; nothing was rolled back"
        )
    return schema


def refuse_occupied(conn: psycopg.Connection, schema: str, outcome: str = "nothing was rolled back") -> None:
    """ConfigError when `schema` already holds a table of yoyo's (planted, or left over)."""
    for table in YOYO_TABLES:
        found = conn.execute(sql.LEGACY_YOYO_TABLE, (schema, table)).fetchone()
        if found is not None:
            raise ConfigError(
                f"refusing to roll back below the bookkeeping of 0.2.0: {found[0]} already exists and "
                f"yoyo's tables would be moved there; inspect it, drop it, roll back again; {outcome}"
            )


def hand_back(conn: psycopg.Connection, schema: str) -> None:
    """Moves yoyo's tables from BOOKKEEPING_SCHEMA to `schema` and drops the (then empty)
    bookkeeping schema: an earlier release's migrate finds what was applied, and this
    release's next migrate moves them in again (ensure_bookkeeping)."""
    with conn.transaction():
        # planted since the check before the rollback: the migrations are rolled back, their record stays ours
        refuse_occupied(conn, schema, f"the migrations were rolled back, yoyo's tables stay in {BOOKKEEPING_SCHEMA}")
        for table in YOYO_TABLES:
            if one(conn.execute(sql.REGCLASS, (f"{BOOKKEEPING_SCHEMA}.{table}",)))[0] is not None:
                move = psql.SQL("ALTER TABLE {}.{} SET SCHEMA {}")
                conn.execute(
                    move.format(psql.Identifier(BOOKKEEPING_SCHEMA), psql.Identifier(table), psql.Identifier(schema))
                )
        conn.execute(f"DROP SCHEMA {BOOKKEEPING_SCHEMA}")  # RESTRICT: anything else in it stops us
    log.info("moved yoyo's tables from schema %s back into %s, for an earlier release", BOOKKEEPING_SCHEMA, schema)
