"""The migrate lock: one migrate of a database at a time, and who is in the way when not.

Two deploys starting at once both run migrate; the advisory lock serialises them, and
yoyo's own lock row (which a killed migrate can leave behind) is cleared under it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

import psycopg

from scrinalia_workers.errors import MigrateLockBusy
from scrinalia_workers.gateway.connection import one
from scrinalia_workers.gateway.statements import admin as sql

log = logging.getLogger("scrinalia_workers.migrate")

# Serialises concurrent migrates of one database (two deploys starting at once).
MIGRATE_LOCK_KEY = 7305764011424514050
YOYO_LOCK_TABLE = f"{sql.BOOKKEEPING_SCHEMA}.yoyo_lock"


@dataclass
class Holder:
    pid: int
    role: str | None
    application_name: str | None
    since: datetime | None
    client: object

    def describe(self) -> str:
        since = self.since.isoformat(timespec="seconds") if self.since else "unknown"
        return (
            f"pid {self.pid}, role {self.role or '?'}, application_name "
            f"{self.application_name or '-'!r}, connected since {since}"
            + (f", from {self.client}" if self.client else "")
        )


def lock_holders(conn: psycopg.Connection) -> list[Holder]:
    rows = conn.execute(sql.MIGRATE_LOCK_HOLDERS, (MIGRATE_LOCK_KEY >> 32, MIGRATE_LOCK_KEY & 0xFFFFFFFF)).fetchall()
    return [Holder(*r) for r in rows]


def take_lock(conn: psycopg.Connection, timeout: float) -> None:
    """The advisory lock, waited for `timeout` seconds at most (0: not at all)."""
    ms = max(int(timeout * 1000), 0)
    try:
        if ms == 0:
            if not one(conn.execute(sql.TRY_MIGRATE_LOCK, (MIGRATE_LOCK_KEY,)))[0]:
                raise psycopg.errors.LockNotAvailable("not waited for")
        else:
            with conn.transaction():  # SET LOCAL: the wait bound ends with this statement
                conn.execute(f"SET LOCAL lock_timeout = {ms}")
                conn.execute(sql.TAKE_MIGRATE_LOCK, (MIGRATE_LOCK_KEY,))
    except psycopg.errors.LockNotAvailable:
        holders = lock_holders(conn)
        who = "; ".join(h.describe() for h in holders) or "a session that has since let go"
        raise MigrateLockBusy(
            f"another session holds the migrate lock (advisory key {MIGRATE_LOCK_KEY}) after "
            f"waiting {timeout:g}s: {who}. If it is not a migrate, end it "
            "(SELECT pg_terminate_backend(pid)); else let it finish, or raise --lock-timeout"
        ) from None


def clear_stale_yoyo_lock(conn: psycopg.Connection, timeout: float) -> None:
    """Under our advisory lock no other migrate runs: a row in yoyo's lock table is the
    leftover of a migrate that was killed, which would otherwise block every deploy."""
    try:
        with conn.transaction():
            conn.execute(f"SET LOCAL lock_timeout = {max(int(timeout * 1000), 1)}")
            for pid, ctime in conn.execute(sql.CLEAR_YOYO_LOCK).fetchall():
                log.warning(
                    "removed yoyo's lock row of process %s (taken %s UTC) left by a migrate that did not finish",
                    pid,
                    ctime,
                )
    except psycopg.errors.LockNotAvailable:
        raise yoyo_lock_busy(conn, timeout) from None


def yoyo_lock_busy(conn: psycopg.Connection, timeout: float) -> MigrateLockBusy:
    """Names the sessions (other than ours and yoyo's) with a lock on yoyo's lock table:
    an open transaction that wrote its row."""
    rows = conn.execute(sql.YOYO_LOCK_HOLDERS, (YOYO_LOCK_TABLE,)).fetchall()
    who = "; ".join(Holder(*r).describe() for r in rows) or "a session that has since let go"
    return MigrateLockBusy(
        f"yoyo's lock table {YOYO_LOCK_TABLE} stayed taken for {timeout:.0f}s by an open "
        f"transaction: {who}. End it (SELECT pg_terminate_backend(pid))"
    )


def code_lock_busy(conn: psycopg.Connection, waited: float, attempt: float) -> MigrateLockBusy:
    """Names the sessions in the way of the code's re-install: those holding a lock on a
    relation of ours in a transaction older than the last attempt's wait."""
    rows = conn.execute(sql.CODE_LOCK_HOLDERS, (f"{attempt:.3f} seconds",)).fetchall()
    who = "; ".join(
        f"pid {pid} (login {login or '?'}, application_name {app or '-'!r}, {state or 'state hidden'}, "
        f"in a transaction for {age if age is not None else '?'}s) holds {holds}"
        for pid, login, app, state, age, holds in rows
    )
    return MigrateLockBusy(
        f"the re-install of the SQL code waited {waited:g}s (--lock-timeout) for locks open transactions hold: "
        f"{who or 'a session that has since let go'}. End it (SELECT pg_terminate_backend(pid)) or let it "
        "finish, then run migrate again, or raise --lock-timeout; the code was left as it was "
        "(migrations applied before it stay)"
    )
