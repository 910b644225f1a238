"""Apply the migrations (yoyo) and then the code in sql/ (replaced in place each time).

The tables are versioned by migrations/; the functions, views and grants in sql/ are
created or replaced in one transaction after them, and what an earlier release
defined and this one does not is dropped in it too (see apply_code).

Migrate runs as a powerful login (the owner, often a superuser), so nothing it runs may
resolve a name in a schema another login can create in (issue 9): both its connection
and yoyo's pin the search path to pg_catalog, [our bookkeeping schema,] pg_temp, and
yoyo's bookkeeping tables live in a schema of ours (BOOKKEEPING_SCHEMA), not in
`public`. Code created under that path binds the built-ins once and for all.
"""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg
from yoyo import exceptions as yoyo_exceptions
from yoyo import read_migrations
from yoyo.backends.core.postgresql import PostgresqlPsycopgBackend
from yoyo.connections import default_migration_table, parse_uri

from scrinalia_workers import sqlfiles as paths
from scrinalia_workers.admin import groups
from scrinalia_workers.errors import (
    ConfigError,
    MigrateLockBusy,
    MissingPrivilege,
    RollbackRefused,
)
from scrinalia_workers.gateway.connection import connect

log = logging.getLogger("scrinalia_workers.migrate")

# Serialises concurrent migrates of one database (two deploys starting at once).
MIGRATE_LOCK_KEY = 7305764011424514050
DEFAULT_LOCK_TIMEOUT = 60.0  # seconds a migrate waits for another one before giving up

# Where yoyo keeps what it applied: a schema the migrating login owns.
BOOKKEEPING_SCHEMA = "scrinalia_migrations"
YOYO_TABLES = ("_yoyo_migration", "_yoyo_log", "_yoyo_version", "yoyo_lock")
SEARCH_PATH = "pg_catalog, pg_temp"
YOYO_SEARCH_PATH = f"pg_catalog, {BOOKKEEPING_SCHEMA}, pg_temp"

SCHEDULES_MIGRATION = "0003_schedules_retries"


# --- connections ------------------------------------------------------------------


def _pin(conn: psycopg.Connection, path: str = SEARCH_PATH) -> None:
    # SET is a utility statement: no name is resolved to run it. Issued outside any
    # transaction, so that no rollback undoes it.
    conn.execute(f"SET search_path = {path}")


def _resolved_conninfo(conn: psycopg.Connection) -> str:
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
        connection.execute(f"SET search_path = {YOYO_SEARCH_PATH}")

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
        return [
            r[0]
            for r in self.execute(
                "SELECT tablename FROM pg_catalog.pg_tables WHERE schemaname = :schema", {"schema": BOOKKEEPING_SCHEMA}
            ).fetchall()
        ]

    def _check_transactional_ddl(self):
        # PostgreSQL's DDL is transactional; yoyo's probe would create an unqualified
        # table, which the pinned path sends to pg_catalog.
        return True


# --- the lock ------------------------------------------------------------------------


@dataclass
class Holder:
    pid: int
    role: str | None
    application_name: str | None
    since: object
    client: object

    def describe(self) -> str:
        since = self.since.isoformat(timespec="seconds") if self.since else "unknown"
        return (
            f"pid {self.pid}, role {self.role or '?'}, application_name "
            f"{self.application_name or '-'!r}, connected since {since}"
            + (f", from {self.client}" if self.client else "")
        )


def lock_holders(conn: psycopg.Connection) -> list[Holder]:
    rows = conn.execute(
        """
        SELECT l.pid, a.usename, a.application_name, a.backend_start, a.client_addr
          FROM pg_catalog.pg_locks l
          LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid OPERATOR(pg_catalog.=) l.pid
         WHERE l.locktype OPERATOR(pg_catalog.=) 'advisory' AND l.granted
           AND l.database OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d
                                                   WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
           AND l.classid::pg_catalog.int8 OPERATOR(pg_catalog.=) %s::pg_catalog.int8
           AND l.objid::pg_catalog.int8 OPERATOR(pg_catalog.=) %s::pg_catalog.int8
           AND l.objsubid OPERATOR(pg_catalog.=) 1""",
        (MIGRATE_LOCK_KEY >> 32, MIGRATE_LOCK_KEY & 0xFFFFFFFF),
    ).fetchall()
    return [Holder(*r) for r in rows]


def _take_lock(conn: psycopg.Connection, timeout: float) -> None:
    """The advisory lock, waited for `timeout` seconds at most (0: not at all)."""
    ms = max(int(timeout * 1000), 0)
    try:
        if ms == 0:
            got = conn.execute(
                "SELECT pg_catalog.pg_try_advisory_lock(%s::pg_catalog.int8)", (MIGRATE_LOCK_KEY,)
            ).fetchone()[0]
            if not got:
                raise psycopg.errors.LockNotAvailable("not waited for")
        else:
            with conn.transaction():  # SET LOCAL: the wait bound ends with this statement
                conn.execute(f"SET LOCAL lock_timeout = {ms}")
                conn.execute("SELECT pg_catalog.pg_advisory_lock(%s::pg_catalog.int8)", (MIGRATE_LOCK_KEY,))
    except psycopg.errors.LockNotAvailable:
        holders = lock_holders(conn)
        who = "; ".join(h.describe() for h in holders) or "a session that has since let go"
        raise MigrateLockBusy(
            f"another session holds the migrate lock (advisory key {MIGRATE_LOCK_KEY}) after "
            f"waiting {timeout:g}s: {who}. If it is not a migrate, end it "
            "(SELECT pg_terminate_backend(pid)); else let it finish, or raise --lock-timeout"
        ) from None


# --- checks before changing anything --------------------------------------------------


def _check_schema_owners(conn: psycopg.Connection) -> None:
    """Our schemas, when they exist, belong to a login we trust: one that got CREATE on
    the database could otherwise pre-create them and own what migrate puts there."""
    rows = conn.execute(
        "SELECT n.nspname::text, pg_catalog.pg_get_userbyid(n.nspowner)::text FROM pg_catalog.pg_namespace n"
        " WHERE n.nspname OPERATOR(pg_catalog.=) ANY (%s::pg_catalog.text[])"
        f" AND NOT {_trusted_owner_sql('n.nspowner')}",
        (["scrinalia", BOOKKEEPING_SCHEMA],),
    ).fetchall()
    if rows:
        names = ", ".join(f"schema {s} is owned by {o}" for s, o in rows)
        raise ConfigError(
            f"refusing to migrate: {names}, neither this login, a superuser nor the "
            "database owner; inspect it (it may have been planted), then drop it or "
            "change its owner; nothing was changed"
        )


def _check_privileges(conn: psycopg.Connection) -> None:
    """Names the privilege this login lacks (not a group), before anything changes."""
    me = conn.execute(
        "SELECT current_user, rolsuper FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) current_user"
    ).fetchone()
    if me[1]:
        return
    db = conn.execute(
        "SELECT current_database(), pg_catalog.pg_get_userbyid(datdba) "
        "FROM pg_catalog.pg_database WHERE datname OPERATOR(pg_catalog.=) current_database()"
    ).fetchone()
    owners = dict(
        conn.execute(
            "SELECT n.nspname::text, pg_catalog.pg_get_userbyid(n.nspowner)::text FROM pg_catalog.pg_namespace n "
            "WHERE n.nspname OPERATOR(pg_catalog.=) ANY (%s::pg_catalog.text[]) "
            "AND NOT pg_catalog.pg_has_role(current_user, n.nspowner, 'USAGE')",
            (["scrinalia", BOOKKEEPING_SCHEMA],),
        ).fetchall()
    )
    if owners:
        names = ", ".join(f"schema {s} is owned by {o}" for s, o in sorted(owners.items()))
        raise MissingPrivilege(
            f"login {me[0]} cannot migrate this database: {names}; migrate as that owner (or a "
            "superuser), or transfer ownership (ALTER SCHEMA ... OWNER TO, and its objects)"
        )
    present = {
        r[0]
        for r in conn.execute(
            "SELECT nspname::text FROM pg_catalog.pg_namespace WHERE nspname OPERATOR(pg_catalog.=) "
            "ANY (%s::pg_catalog.text[])",
            (["scrinalia", BOOKKEEPING_SCHEMA],),
        )
    }
    if (
        len(present) < 2
        and not conn.execute("SELECT pg_catalog.has_database_privilege(current_database(), 'CREATE')").fetchone()[0]
    ):
        raise MissingPrivilege(
            f"login {me[0]} lacks CREATE on database {db[0]} (owned by {db[1]}), needed to create "
            "its schemas: migrate as the database owner, or GRANT CREATE ON DATABASE to this login"
        )


def _ensure_groups(conn: psycopg.Connection, create: bool) -> None:
    gone = groups.missing(conn)
    if not gone:
        return
    if not create:
        raise ConfigError(groups.missing_message(gone))
    done = groups.create(conn)
    log.info("created the cluster-wide groups: %s", ", ".join(done))


# --- yoyo's bookkeeping ---------------------------------------------------------------


def _trusted_owner_sql(col: str) -> str:
    """The owner is this very login, a superuser, or the database owner (not merely a
    role this login is a member of: another member could have acted as it)."""
    return (
        f"({col} OPERATOR(pg_catalog.=) (SELECT r.oid FROM pg_catalog.pg_roles r"
        f"    WHERE r.rolname OPERATOR(pg_catalog.=) current_user)"
        f" OR (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) {col})"
        f" OR {col} OPERATOR(pg_catalog.=) (SELECT d.datdba FROM pg_catalog.pg_database d"
        f"    WHERE d.datname OPERATOR(pg_catalog.=) current_database()))"
    )


def _ensure_bookkeeping(conn: psycopg.Connection) -> None:
    """BOOKKEEPING_SCHEMA exists; a database migrated by an older release, whose yoyo
    tables are where its search path put them (usually `public`), has them moved in.
    Tables owned by anybody else (planted by another login) are left alone."""
    with conn.transaction():
        exists = conn.execute(
            "SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname OPERATOR(pg_catalog.=) %s", (BOOKKEEPING_SCHEMA,)
        ).fetchone()
        if exists:
            return
        conn.execute(f"CREATE SCHEMA {BOOKKEEPING_SCHEMA}")
        conn.execute(f"REVOKE ALL ON SCHEMA {BOOKKEEPING_SCHEMA} FROM PUBLIC")
        legacy = conn.execute(
            "SELECT n.nspname::text FROM pg_catalog.pg_class c"
            " JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace"
            " WHERE c.relname OPERATOR(pg_catalog.=) %s AND c.relkind OPERATOR(pg_catalog.=) 'r'"
            " AND n.nspname OPERATOR(pg_catalog.<>) ALL (ARRAY['pg_catalog', 'information_schema', %s])"
            f" AND {_trusted_owner_sql('c.relowner')}",
            (default_migration_table, BOOKKEEPING_SCHEMA),
        ).fetchall()
        if not legacy:
            return
        if len(legacy) > 1:
            raise ConfigError(
                f"yoyo's {default_migration_table} table is in several schemas "
                f"({', '.join(r[0] for r in legacy)}): keep the right one, drop the others, migrate again"
            )
        source = legacy[0][0]
        for table in YOYO_TABLES:
            found = conn.execute(
                "SELECT c.oid::pg_catalog.regclass::text, "
                + _trusted_owner_sql("c.relowner")
                + " FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n"
                " ON n.oid OPERATOR(pg_catalog.=) c.relnamespace"
                " WHERE n.nspname OPERATOR(pg_catalog.=) %s AND c.relname OPERATOR(pg_catalog.=) %s",
                (source, table),
            ).fetchone()
            if found is None:
                continue
            if not found[1]:
                raise ConfigError(
                    f"{found[0]} is owned by a login that did not migrate this "
                    "database: inspect it, drop it, migrate again"
                )
            conn.execute(f"ALTER TABLE {found[0]} SET SCHEMA {BOOKKEEPING_SCHEMA}")
        log.info("moved yoyo's tables from schema %s into %s", source, BOOKKEEPING_SCHEMA)


def _clear_stale_yoyo_lock(conn: psycopg.Connection, timeout: float) -> None:
    """Under our advisory lock no other migrate runs: a row in yoyo's lock table is the
    leftover of a migrate that was killed, which would otherwise block every deploy."""
    table = f"{BOOKKEEPING_SCHEMA}.yoyo_lock"
    try:
        with conn.transaction():
            conn.execute(f"SET LOCAL lock_timeout = {max(int(timeout * 1000), 1)}")
            for pid, ctime in conn.execute(f"DELETE FROM {table} RETURNING pid, ctime").fetchall():
                log.warning(
                    "removed yoyo's lock row of process %s (taken %s UTC) left by a migrate that did not finish",
                    pid,
                    ctime,
                )
    except psycopg.errors.LockNotAvailable:
        raise _yoyo_lock_busy(conn, timeout) from None


def _yoyo_lock_busy(conn: psycopg.Connection, timeout: float) -> MigrateLockBusy:
    """Names the sessions (other than ours and yoyo's) with a lock on yoyo's lock table:
    an open transaction that wrote its row."""
    table = f"{BOOKKEEPING_SCHEMA}.yoyo_lock"
    rows = conn.execute(
        "SELECT DISTINCT l.pid, a.usename, a.application_name, a.backend_start, a.client_addr"
        "  FROM pg_catalog.pg_locks l"
        "  LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid OPERATOR(pg_catalog.=) l.pid"
        " WHERE l.relation OPERATOR(pg_catalog.=) pg_catalog.to_regclass(%s) AND l.granted"
        "   AND a.application_name OPERATOR(pg_catalog.!~~) 'scrinalia-workers migrate%%'",
        (table,),
    ).fetchall()
    who = "; ".join(Holder(*r).describe() for r in rows) or "a session that has since let go"
    return MigrateLockBusy(
        f"yoyo's lock table {table} stayed taken for {timeout:.0f}s by an open "
        f"transaction: {who}. End it (SELECT pg_terminate_backend(pid))"
    )


@contextmanager
def _migrating(dsn: str, *, lock_timeout: float, create_groups: bool = False, check_groups: bool = True):
    """Our pinned connection holding the migrate lock, and a pinned yoyo backend."""
    with connect(dsn, application_name="scrinalia-workers migrate") as conn:
        _pin(conn)
        started = time.monotonic()
        _take_lock(conn, lock_timeout)
        if check_groups:
            _ensure_groups(conn, create_groups)
        _check_schema_owners(conn)
        _check_privileges(conn)
        _ensure_bookkeeping(conn)
        backend = PinnedBackend(_resolved_conninfo(conn))
        try:
            backend.init_database()  # creates yoyo's lock table in our schema
            _clear_stale_yoyo_lock(conn, max(lock_timeout - (time.monotonic() - started), 1.0))
            remaining = max(lock_timeout - (time.monotonic() - started), 1.0)
            # yoyo polls its lock row for `remaining` seconds; a row held by an open
            # transaction would block its INSERT outright: bound that wait as well.
            backend.connection.execute(f"SET lock_timeout = {int(remaining * 1000)}")
            try:
                with backend.lock(timeout=remaining):
                    yield conn, backend, read_migrations(str(paths.migrations_dir()))
            except yoyo_exceptions.LockTimeout:
                raise _yoyo_lock_busy(conn, remaining) from None
        finally:
            backend.connection.close()


def head_ids() -> list[str]:
    """The ids of every migration of this release, in order."""
    return [m.id for m in read_migrations(str(paths.migrations_dir()))]


# --- the commands ---------------------------------------------------------------------


# sql/ may say CREATE FUNCTION / CREATE VIEW: the code is always replaced in place.
def apply_code(conn: psycopg.Connection) -> None:
    """Creates or replaces every function and view of sql/ in one transaction, then drops
    those of an earlier release that this one no longer defines (99_drop_obsolete.sql).

    Replacing in place keeps each function's OID: a client calling it meanwhile sees
    the old or the new body, never a missing function (issue 13). The price: a
    function cannot change its return type or parameter names, nor a view drop, rename
    or retype a column, in place; such a change is a new name (`name_v2`), and the old
    one goes when no longer defined."""
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        # 99_drop_obsolete.sql tells this release's code by the top-level transaction id:
        # inside a caller's transaction (a savepoint) it would see none and drop it all
        raise ConfigError("apply_code needs a connection outside any transaction")
    with conn.transaction():
        for f in paths.sql_files():
            try:
                conn.execute(f.read_text())
            except (psycopg.errors.InvalidFunctionDefinition, psycopg.errors.InvalidTableDefinition) as e:
                raise ConfigError(
                    f"sql/{f.name}: {e.diag.message_primary}: the code is replaced in place while "
                    "clients run, so a function whose return type or parameter names change, or a "
                    "view whose columns change other than by appending, needs a new name (e.g. "
                    "name_v2); nothing was changed"
                ) from None


def migrate(dsn: str, *, create_groups: bool = False, lock_timeout: float = DEFAULT_LOCK_TIMEOUT) -> list[str]:
    """Bring the database to the head; returns the ids of the migrations applied.

    The cluster-wide groups must exist (groups.py) unless `create_groups`, which creates
    them first when missing (needs CREATEROLE)."""
    with _migrating(dsn, lock_timeout=lock_timeout, create_groups=create_groups) as (conn, backend, migrations):
        pending = backend.to_apply(migrations)
        backend.apply_migrations(pending)
        apply_code(conn)
    applied = [m.id for m in pending]
    for mid in applied:
        log.info("applied migration %s", mid)
    return applied


def _refuse_losing_schedule_runs(conn: psycopg.Connection, todo) -> None:
    if SCHEDULES_MIGRATION not in [m.id for m in todo]:
        return
    if conn.execute("SELECT to_regclass('scrinalia.archive_worker_runs')").fetchone()[0] is None:
        return
    runs, schedules = conn.execute(
        "SELECT (SELECT count(*) FROM scrinalia.archive_worker_runs"
        "         WHERE trigger OPERATOR(pg_catalog.=) 'SCHEDULE'),"
        "       (SELECT count(*) FROM scrinalia.archive_worker_schedules)"
    ).fetchone()
    if runs:
        raise RollbackRefused(
            f"refusing to roll back {SCHEDULES_MIGRATION}: it would delete {runs} SCHEDULE run(s) "
            f"(and drop {schedules} schedule(s)); nothing was rolled back. To proceed, export what you "
            "keep (e.g. \\copy (SELECT * FROM scrinalia.archive_worker_runs WHERE trigger = 'SCHEDULE') "
            "TO 'schedule_runs.csv' CSV HEADER), delete them explicitly (DELETE FROM "
            "scrinalia.archive_worker_runs WHERE trigger = 'SCHEDULE'), then roll back again"
        )


def rollback(dsn: str, count: int | None = None, *, lock_timeout: float = DEFAULT_LOCK_TIMEOUT) -> list[str]:
    """Roll back the last `count` migrations (all when None)."""
    with _migrating(dsn, lock_timeout=lock_timeout, check_groups=False) as (conn, backend, migrations):
        todo = backend.to_rollback(migrations)
        if count is not None:
            todo = todo[:count]
        _refuse_losing_schedule_runs(conn, todo)
        backend.rollback_migrations(todo)
    return [m.id for m in todo]


def applied_migrations(dsn: str) -> list[str]:
    with connect(dsn, application_name="scrinalia-workers migrate") as conn:
        _pin(conn)
        if (
            conn.execute("SELECT to_regclass(%s)", (f"{BOOKKEEPING_SCHEMA}.{default_migration_table}",)).fetchone()[0]
            is None
        ):
            return []
        done = {r[0] for r in conn.execute(f"SELECT migration_id FROM {BOOKKEEPING_SCHEMA}.{default_migration_table}")}
    return [mid for mid in head_ids() if mid in done]
