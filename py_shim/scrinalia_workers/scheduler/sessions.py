"""The scheduler's two database sessions: the *lock session* that holds the advisory
lock, heartbeats and LISTENs, and the *work session* that runs the passes.

The lock is session-scoped, so both must be sessions of their own: direct, or through
a session-mode pooler. Behind a transaction-mode pooler the lock would land on a
backend we do not keep; that is detected (two client connections sharing one server
session, or a heartbeat answered by another session) and refused (UnsafeConnection).
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row

from scrinalia_workers.errors import NOT_THE_SCHEDULER, LockLost, UnsafeConnection
from scrinalia_workers.gateway import connection as db
from scrinalia_workers.gateway.checks import check_schema, schema_moved
from scrinalia_workers.gateway.statements import scheduler as sql

TRANSACTION_POOLER = (
    "the scheduler's two sessions are not its own: a transaction-mode pooler is in the "
    "way (the advisory lock is per session); connect directly or through a "
    "session-mode pool"
)


def one_row(cur: psycopg.Cursor[dict[str, Any]]) -> dict[str, Any]:
    """The row of a statement that returns exactly one (a function call)."""
    row = cur.fetchone()
    if row is None:
        raise psycopg.ProgrammingError("a statement that returns one row returned none")
    return row


def _call(conn: psycopg.Connection, statement: str, params: tuple = ()) -> dict[str, Any]:
    """The one row of a call on the lock session. A call the database no longer knows (the
    code rolled back, or another release's migrate under us) is this release's end: the
    schema check's one line and exit 2, never a standby that retries it for ever."""
    try:
        return one_row(conn.cursor(row_factory=dict_row).execute(statement, params))
    except psycopg.Error as e:
        moved = schema_moved(conn, e) if not conn.broken else None
        if moved is not None:
            raise moved from None
        raise


def _server_pid(conn: psycopg.Connection) -> int:
    return one_row(conn.cursor(row_factory=dict_row).execute(sql.SERVER_PID))["pid"]


class Sessions:
    """The lock session (opened at the first attempt, kept while standing by) and the
    work session (opened once the lock is ours). Implements leadership.LockSession."""

    def __init__(self, dsn: str, name: str, idle_margin: float = 5.0):
        self.dsn = dsn
        self.name = name
        self.idle_margin = idle_margin  # the longest wait between two of our statements
        self.lock_conn: psycopg.Connection | None = None
        self.work_conn: psycopg.Connection | None = None
        self.lock_pid: int | None = None
        self.work_pid: int | None = None
        # the work session to be, opened before the lock is taken so that the statement
        # taking it can vouch for it (the heartbeat names it); kept while standing by
        self._next_work: psycopg.Connection | None = None

    @property
    def lock(self) -> psycopg.Connection:
        if self.lock_conn is None:
            raise LockLost("the lock session is closed")
        return self.lock_conn

    @property
    def work(self) -> psycopg.Connection:
        if self.work_conn is None:
            raise LockLost("the work session is closed: the lock is not held")
        return self.work_conn

    def _lock_session(self) -> psycopg.Connection:
        if self.lock_conn is None or self.lock_conn.closed:
            self.lock_conn = db.connect(self.dsn, application_name="scrinalia-scheduler lock", server_keepalives=True)
            self.lock_pid = _server_pid(self.lock_conn)
            self.lock_conn.execute(sql.LIMIT_SESSION, (self.idle_margin,))
        return self.lock_conn

    def _next_work_session(self) -> tuple[psycopg.Connection, int]:
        """The session that will tick once the lock is ours, and its server pid."""
        if self._next_work is not None and not self._next_work.closed:
            try:
                return self._next_work, _server_pid(self._next_work)
            except psycopg.Error:  # ended meanwhile (a restart, an idle limit): a new one
                self._next_work.close()
        self._next_work = db.connect(self.dsn, application_name="scrinalia-scheduler")
        self._next_work.execute(sql.SET_LOCK_TIMEOUT)
        return self._next_work, _server_pid(self._next_work)

    def acquire(self, wait: float = 0.0) -> bool:
        """One attempt at the lock, waiting in its queue at most `wait` seconds; True
        when held and the work session is ready."""
        conn = self._lock_session()
        work, work_pid = self._next_work_session()
        # two client connections share a server session only behind a transaction pooler
        if work_pid == self.lock_pid:
            raise UnsafeConnection(TRANSACTION_POOLER)
        got = _call(conn, sql.TAKE_LOCK, (self.name, wait, work_pid))["got"]
        if not got:
            return False
        self.work_conn, self.work_pid, self._next_work = work, work_pid, None
        check_schema(conn)  # a deploy may have moved the schema while we stood by
        self.work_conn.execute(sql.LIMIT_SESSION, (self.idle_margin,))
        if not self.heartbeat():
            raise UnsafeConnection(TRANSACTION_POOLER)
        conn.execute(sql.LISTEN)
        return True

    def heartbeat(self) -> bool:
        """True while our lock session holds the lock; records the heartbeat, which
        vouches for the work session (only then may it tick)."""
        try:
            row = _call(self.lock, sql.HEARTBEAT, (self.name, self.work_pid))
        except psycopg.Error as e:
            if e.sqlstate != NOT_THE_SCHEDULER:
                raise
            # not the holder, or our work session is gone: the lock is not ours to use
            row = {"held": False, "pid": _server_pid(self.lock)}
        if row["pid"] != self.lock_pid:  # the pooler handed our statement to another session
            raise UnsafeConnection(TRANSACTION_POOLER)
        return bool(row["held"])

    def evict_stale(self, seen_pid: int | None = None) -> dict[str, Any]:
        """scrinalia.evict_lock_holder(): ends a holder that is not a scheduler (`seen_pid`:
        the one seen holding it last time) or whose heartbeat is stale."""
        return _call(self.lock, sql.EVICT_LOCK_HOLDER, (seen_pid,))

    def holder(self) -> dict[str, Any]:
        """Who holds the lock (scrinalia.scheduler_status())."""
        return _call(self.lock, sql.LOCK_HOLDER_HEARTBEAT)

    def notified(self, timeout: float) -> bool:
        """Waits up to `timeout` seconds for a NOTIFY on the lock session; True when one came."""
        return any(True for _ in self.lock.notifies(timeout=timeout, stop_after=1))

    def release(self) -> None:
        self.lock.execute(sql.RELEASE_LOCK)

    def close(self) -> None:
        for c in (self.work_conn, self.lock_conn, self._next_work):
            if c is not None:
                try:
                    c.close()
                except Exception:  # noqa: BLE001 - closing a broken connection
                    pass
        self.work_conn = self.lock_conn = self._next_work = None
        self.lock_pid = self.work_pid = None
