"""yoyo's bookkeeping: its backend pinned to our search path and schema, and the move of
an older release's yoyo tables into that schema.

yoyo's tables live in BOOKKEEPING_SCHEMA, a schema the migrating login owns, never in
`public`, where another login could plant a table of the same name.
"""

from __future__ import annotations

import logging

import psycopg
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
