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

import psycopg
from yoyo import exceptions as yoyo_exceptions
from yoyo import read_migrations

from scrinalia_workers import __version__
from scrinalia_workers import sqlfiles as paths
from scrinalia_workers.admin import groups
from scrinalia_workers.admin.bookkeeping import (
    BOOKKEEPING_SCHEMA,
    BOOKKEEPING_SINCE,
    YOYO_TABLES,
    PinnedBackend,
    applied_ids,
    ensure_bookkeeping,
    hand_back,
    legacy_schema,
    refuse_occupied,
    resolved_conninfo,
)
from scrinalia_workers.admin.migrate_lock import (
    MIGRATE_LOCK_KEY,
    clear_stale_yoyo_lock,
    code_lock_busy,
    take_lock,
    yoyo_lock_busy,
)
from scrinalia_workers.errors import (
    ConfigError,
    MigrateLockBusy,
    MissingPrivilege,
    RollbackRefused,
    SchemaMismatch,
)
from scrinalia_workers.gateway.backoff import Backoff
from scrinalia_workers.gateway.checks import OPTIONAL_GROUPS, refuse_unsound_groups
from scrinalia_workers.gateway.connection import connect, one
from scrinalia_workers.gateway.statements import admin as sql

__all__ = [
    "BOOKKEEPING_SCHEMA",
    "MIGRATE_LOCK_KEY",
    "YOYO_TABLES",
    "ConfigError",
    "MigrateLockBusy",
    "RollbackRefused",
    "apply_code",
    "applied_migrations",
    "head_ids",
    "migrate",
    "rollback",
]

log = logging.getLogger("scrinalia_workers.migrate")

DEFAULT_LOCK_TIMEOUT = 60.0  # seconds a migrate waits for another one before giving up
# The longest one attempt of the code's re-install waits for a lock: a reader queued
# behind its wait (behind a panel's open transaction) waits no longer than this.
CODE_LOCK_ATTEMPT = 0.1

SCHEDULES_MIGRATION = "0003_schedules_retries"


# --- connections ------------------------------------------------------------------


def _pin(conn: psycopg.Connection, path: str = sql.SEARCH_PATH) -> None:
    # SET is a utility statement: no name is resolved to run it. Issued outside any
    # transaction, so that no rollback undoes it.
    conn.execute(f"SET search_path = {path}")


# --- the lock ------------------------------------------------------------------------


# --- checks before changing anything --------------------------------------------------


def _check_schema_owners(conn: psycopg.Connection) -> None:
    """Our schemas, when they exist, belong to a login we trust: one that got CREATE on
    the database could otherwise pre-create them and own what migrate puts there."""
    rows = conn.execute(sql.UNTRUSTED_SCHEMA_OWNERS, (sql.OWN_SCHEMAS,)).fetchall()
    if rows:
        names = ", ".join(f"schema {s} is owned by {o}" for s, o in rows)
        raise ConfigError(
            f"refusing to migrate: {names}, neither this login, a superuser nor the "
            "database owner; inspect it (it may have been planted), then drop it or "
            "change its owner; nothing was changed"
        )


def _check_privileges(conn: psycopg.Connection) -> None:
    """Names the privilege this login lacks (not a group), before anything changes."""
    me = one(conn.execute(sql.ME))
    if me[1]:
        return
    db = one(conn.execute(sql.THIS_DATABASE))
    owners: dict[str, str] = dict(conn.execute(sql.FOREIGN_SCHEMA_OWNERS, (sql.OWN_SCHEMAS,)).fetchall())
    if owners:
        names = ", ".join(f"schema {s} is owned by {o}" for s, o in sorted(owners.items()))
        raise MissingPrivilege(
            f"login {me[0]} cannot migrate this database: {names}; migrate as that owner (or a "
            "superuser), or transfer ownership (ALTER SCHEMA ... OWNER TO, and its objects)"
        )
    present = {r[0] for r in conn.execute(sql.PRESENT_SCHEMAS, (sql.OWN_SCHEMAS,))}
    if len(present) < 2 and not one(conn.execute(sql.MAY_CREATE_SCHEMAS))[0]:
        raise MissingPrivilege(
            f"login {me[0]} lacks CREATE on database {db[0]} (owned by {db[1]}), needed to create "
            "its schemas: migrate as the database owner, or GRANT CREATE ON DATABASE to this login"
        )


def _ensure_groups(conn: psycopg.Connection, create: bool) -> None:
    refuse_unsound_groups(conn)
    gone = groups.missing(conn)
    if not gone:
        return
    if create:
        done = groups.create(conn)
        log.info("created the cluster-wide groups: %s", ", ".join(done))
    elif all(g in OPTIONAL_GROUPS for g in gone):
        log.warning(
            "the cluster-wide group(s) %s do not exist yet, so nothing is granted to them: a login "
            "with CREATEROLE runs `scrinalia-workers groups create` once, then migrate again",
            ", ".join(gone),
        )
    else:
        raise ConfigError(groups.missing_message(gone))


@contextmanager
def _migrating(dsn: str, *, lock_timeout: float, create_groups: bool = False, check_groups: bool = True):
    """Our pinned connection holding the migrate lock, and a pinned yoyo backend."""
    with connect(dsn, application_name="scrinalia-workers migrate") as conn:
        _pin(conn)
        started = time.monotonic()
        take_lock(conn, lock_timeout)
        if check_groups:
            _ensure_groups(conn, create_groups)
        _check_schema_owners(conn)
        _check_privileges(conn)
        ensure_bookkeeping(conn)
        _refuse_unknown_migrations(conn)
        backend = PinnedBackend(resolved_conninfo(conn))
        try:
            backend.init_database()  # creates yoyo's lock table in our schema
            clear_stale_yoyo_lock(conn, max(lock_timeout - (time.monotonic() - started), 1.0))
            remaining = max(lock_timeout - (time.monotonic() - started), 1.0)
            # yoyo polls its lock row for `remaining` seconds; a row held by an open
            # transaction would block its INSERT outright: bound that wait as well.
            backend.connection.execute(f"SET lock_timeout = {int(remaining * 1000)}")
            try:
                with backend.lock(timeout=remaining):
                    yield conn, backend, read_migrations(str(paths.migrations_dir()))
            except yoyo_exceptions.LockTimeout:
                raise yoyo_lock_busy(conn, remaining) from None
        finally:
            backend.connection.close()


def _refuse_unknown_migrations(conn: psycopg.Connection) -> None:
    """A database holding a migration this release does not know was migrated by a newer
    one: re-installing this release's code would drop the newer code its schema needs."""
    unknown = sorted(applied_ids(conn) - set(paths.migration_ids()))
    if unknown:
        raise SchemaMismatch(
            f"refusing to migrate: the database holds migration(s) {', '.join(unknown)}, which this "
            f"scrinalia-workers {__version__} (head {paths.head()}) does not know: this release is older "
            "than the database. Run the release that migrated it, or roll the database back with that "
            "release (docs/operate.md, Downgrading); nothing was changed"
        )


def head_ids() -> list[str]:
    """The ids of every migration of this release, in order."""
    return [m.id for m in read_migrations(str(paths.migrations_dir()))]


# --- the commands ---------------------------------------------------------------------


# sql/ may say CREATE FUNCTION / CREATE VIEW: the code is always replaced in place.
def apply_code(conn: psycopg.Connection, lock_timeout: float = DEFAULT_LOCK_TIMEOUT) -> None:
    """Creates or replaces every function and view of sql/ in one transaction, then drops
    those of an earlier release that this one no longer defines (99_drop_obsolete.sql).

    Replacing in place keeps each function's OID: a client calling it meanwhile sees
    the old or the new body, never a missing function (issue 13). The price: a
    function cannot change its return type or parameter names, nor a view drop, rename
    or retype a column, in place; such a change is a new name (`name_v2`), and the old
    one goes when no longer defined. A lock it waits for longer than `lock_timeout`
    seconds ends it (MigrateLockBusy, naming who holds it), the code as it was."""
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        # 99_drop_obsolete.sql tells this release's code by the top-level transaction id:
        # inside a caller's transaction (a savepoint) it would see none and drop it all
        raise ConfigError("apply_code needs a connection outside any transaction")
    # In short attempts, each waiting CODE_LOCK_ATTEMPT at most for a lock (a view's
    # replacement waits for every open transaction that read it, and every later reader
    # queues behind that wait), retried until `lock_timeout` has passed.
    deadline = time.monotonic() + lock_timeout
    pause = Backoff(base=0.1, cap=1.0)
    while True:
        attempt = max(min(CODE_LOCK_ATTEMPT, deadline - time.monotonic()), 0.001)
        try:
            _install_code(conn, attempt)
            return
        except psycopg.errors.LockNotAvailable:
            left = deadline - time.monotonic()
            if left <= 0:
                raise code_lock_busy(conn, lock_timeout, attempt) from None
            time.sleep(min(pause.next_delay(), left))


def _install_code(conn: psycopg.Connection, lock_wait: float) -> None:
    with conn.transaction():
        conn.execute(f"SET LOCAL lock_timeout = {max(int(lock_wait * 1000), 1)}")
        conn.execute(sql.SET_INSTALLING_RELEASE, (__version__,))  # read by sql/70_status.sql
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
        apply_code(conn, lock_timeout)
        missing = _takeover_grant_missing(conn)
    applied = [m.id for m in pending]
    for mid in applied:
        log.info("applied migration %s", mid)
    if missing:  # said once per migrate: the install works, but a squatter cannot be ended
        log.warning("%s", missing)
    return applied


def _takeover_grant_missing(conn: psycopg.Connection) -> str | None:
    """What the standbys cannot do in this install (scrinalia.takeover_grant_missing()),
    or None; None too for SQL code of its own (SCRINALIA_ROOT) that lacks the function."""
    try:
        with conn.transaction():
            return one(conn.execute(sql.TAKEOVER_GRANT_MISSING))[0]
    except psycopg.errors.UndefinedFunction:
        return None


def _refuse_losing_schedule_runs(conn: psycopg.Connection, todo) -> None:
    if SCHEDULES_MIGRATION not in [m.id for m in todo]:
        return
    if one(conn.execute(sql.REGCLASS, ("scrinalia.archive_worker_runs",)))[0] is None:
        return
    runs, schedules = one(conn.execute(sql.SCHEDULE_RUNS_AND_SCHEDULES))
    if runs:
        raise RollbackRefused(
            f"refusing to roll back {SCHEDULES_MIGRATION}: it would delete {runs} SCHEDULE run(s) "
            f"(and drop {schedules} schedule(s)); nothing was rolled back. To proceed, export what you "
            "keep (e.g. \\copy (SELECT * FROM scrinalia.archive_worker_runs WHERE trigger = 'SCHEDULE') "
            "TO 'schedule_runs.csv' CSV HEADER), delete them explicitly (DELETE FROM "
            "scrinalia.archive_worker_runs WHERE trigger = 'SCHEDULE'), then roll back again"
        )


def rollback(dsn: str, count: int | None = None, *, lock_timeout: float = DEFAULT_LOCK_TIMEOUT) -> list[str]:
    """Roll back the last `count` migrations (all when None).

    The code of sql/ was written for the head: once below it, it goes too (all but the
    scheduler lock's key, which a newer scheduler left running needs to reach its schema
    check and exit). The release whose head the database is now at re-installs its own
    with its migrate. Below BOOKKEEPING_SINCE, yoyo's tables go back where an earlier
    release's yoyo finds them."""
    legacy: str | None = None
    with _migrating(dsn, lock_timeout=lock_timeout, check_groups=False) as (conn, backend, migrations):
        todo = backend.to_rollback(migrations)
        if count is not None:
            todo = todo[:count]
        _refuse_losing_schedule_runs(conn, todo)
        if BOOKKEEPING_SINCE in [m.id for m in todo]:
            legacy = legacy_schema(conn)
            refuse_occupied(conn, legacy)
        backend.rollback_migrations(todo)
        if todo:
            with conn.transaction():
                conn.execute(sql.DROP_CODE)
    if legacy is not None:
        # after yoyo let go of its lock row: its lock table moves too
        with connect(dsn, application_name="scrinalia-workers migrate") as conn:
            _pin(conn)
            take_lock(conn, lock_timeout)
            hand_back(conn, legacy)
    return [m.id for m in todo]


def applied_migrations(dsn: str) -> list[str]:
    with connect(dsn, application_name="scrinalia-workers migrate") as conn:
        _pin(conn)
        done = applied_ids(conn)
    return [mid for mid in head_ids() if mid in done]
