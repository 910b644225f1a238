"""The scheduler's two database sessions: the *lock session* that holds the advisory
lock, heartbeats and LISTENs, and the *work session* that runs the passes.

The lock is session-scoped, so both must be sessions of their own: direct, or through
a session-mode pooler. Behind a transaction-mode pooler the lock would land on a
backend we do not keep; that is detected (two client connections sharing one server
session, or a heartbeat answered by another session) and refused (UnsafeConnection).

Once the lock is held, the server ends the lock session when it is idle, and the work
session when it is idle inside a transaction, for scrinalia.holder_idle_limit(); a
thread of this process (_KeepAlive) keeps them from it: only a frozen (or hung) process
lets them go idle, and its lock then goes to the standby first in the queue.
PostgreSQL 13 has no limit on an idle session, only on one idle inside a transaction:
there the lock session is kept inside one (each statement on it followed by COMMIT and
BEGIN in one message, so that the server never waits for it outside a transaction), and
the LISTEN, whose notifications the server sends only between transactions, is on a
session of its own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row

from scrinalia_workers.errors import NOT_THE_SCHEDULER, LockLost, UnsafeConnection
from scrinalia_workers.exits import leave_signals_to_the_main_thread
from scrinalia_workers.gateway import connection as db
from scrinalia_workers.gateway.checks import check_schema, schema_moved
from scrinalia_workers.gateway.statements import scheduler as sql

# How long one wait of the lock session in the lock's queue lasts (take_scheduler_lock's
# cap): the standby stays in the queue, re-queueing only after this.
QUEUE_WAIT = 3600.0
# How many heartbeats a new holder tries before it gives the lock up, each waiting for
# the scheduler-state row a moment (scrinalia.write_heartbeat).
RECORD_TRIES = 3
# How long stopping waits for the lock session's wait to be cancelled.
CANCEL_WAIT = 5.0
# How often the holder's lock session is sent a statement (its heartbeat), from a thread
# of its own, whatever the passes do: the server ends that session when it is idle for
# scrinalia.holder_idle_limit() (a frozen holder), so this stays well under it on
# a busy machine.
KEEPALIVE_EVERY = 1.0
# How long the holder's loop may go without a statement on its lock session (a heartbeat
# between passes or chunks, a wait for a NOTIFY) before the thread stops keeping the
# session alive: a loop hung in this process then frees the lock as a frozen one does.
# Far longer than a pass's longest step (a chunk of SchedulerSettings.tick_chunk).
LOOP_SILENT_AFTER = 60.0

T = TypeVar("T")

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
        if not conn.broken and conn.info.transaction_status == TransactionStatus.INERROR:
            # (PostgreSQL 13's lock session, kept inside a transaction: the schema check
            # below reads the catalog, which an aborted transaction refuses)
            conn.execute(sql.ROLLBACK_AND_BEGIN)
        moved = schema_moved(conn, e) if not conn.broken else None
        if moved is not None:
            raise moved from None
        raise


def _server_pid(conn: psycopg.Connection) -> int:
    return one_row(conn.cursor(row_factory=dict_row).execute(sql.SERVER_PID))["pid"]


class _Queued:
    """The lock session's wait in the lock's queue (take_scheduler_lock), in a thread of
    its own, so that the standby keeps its place in the queue while its look session
    ends the holder in front of it: an eviction hands the lock towards this standby,
    never to a squatter that queued while the standby was out of the queue."""

    def __init__(self, conn: psycopg.Connection, name: str):
        self.conn = conn
        self.done = threading.Event()
        self.got = False
        self.error: BaseException | None = None
        threading.Thread(target=self._wait, args=(name,), name="scheduler-lock-queue", daemon=True).start()

    def _wait(self, name: str) -> None:
        leave_signals_to_the_main_thread()
        try:
            self.got = bool(_call(self.conn, sql.TAKE_LOCK, (name, QUEUE_WAIT, None))["got"])
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            self.error = e
        finally:
            self.done.set()

    def cancel(self) -> None:
        """Ends the wait (the process stops); the lock, if it came meanwhile, goes with
        the session."""
        if not self.done.is_set():
            try:
                self.conn.cancel()
            except psycopg.Error:
                pass
            self.done.wait(CANCEL_WAIT)


class _KeepAlive:
    """The holder's sessions kept from the server's idle limits while this process runs:
    a thread sends the heartbeat on the lock session (a bare statement before the work
    session is open) whenever nothing was sent on it for KEEPALIVE_EVERY, and a bare
    statement on the work session while the loop computes inside one of its transactions
    (Sessions.computing()). A frozen process sends nothing, so the server ends the
    sessions and the lock goes to the standby first in the queue; no standby needs the
    right to end a session."""

    def __init__(self, sessions: Sessions):
        self.sessions = sessions
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="scheduler-lock-keepalive", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        leave_signals_to_the_main_thread()
        s = self.sessions
        while not self.stop.wait(KEEPALIVE_EVERY / 4):
            if time.monotonic() - s.looped_at > s.loop_silent_after:
                continue  # the loop is hung: the server's limit ends the session
            if time.monotonic() - s.sent_at >= KEEPALIVE_EVERY:
                s.keep_alive()
            s.keep_work_alive()

    def end(self) -> None:
        self.stop.set()
        if self.thread is not threading.current_thread():
            self.thread.join(KEEPALIVE_EVERY)


class Sessions:
    """The lock session (opened at the first attempt, kept in the lock's queue while
    standing by), the look session (the standby's other session: who holds the lock,
    and its eviction) and the work session (opened once the lock is ours: the holder's
    tenure is counted from its start). Implements leadership.LockSession."""

    def __init__(self, dsn: str, name: str, idle_margin: float = 5.0, loop_silent_after: float = LOOP_SILENT_AFTER):
        self.dsn = dsn
        self.loop_silent_after = loop_silent_after
        self.name = name
        self.idle_margin = idle_margin  # the longest wait between two of our statements
        self.lock_conn: psycopg.Connection | None = None
        self.work_conn: psycopg.Connection | None = None
        self.look_conn: psycopg.Connection | None = None
        # where the holder LISTENs: the lock session, or on PostgreSQL 13 one of its own
        self.listen_conn: psycopg.Connection | None = None
        # PostgreSQL 13: the lock session is kept inside a transaction once the lock is ours
        self.lock_in_transaction = False
        self._lock_guard = threading.RLock()  # a statement and its COMMIT; BEGIN together
        self.lock_pid: int | None = None
        self.work_pid: int | None = None
        self._queued: _Queued | None = None
        self._keepalive: _KeepAlive | None = None
        # the server's idle limit on the holder's lock session (None: the server has none)
        self.lock_idle_limit: float | None = None
        # (time.monotonic()) the last statement sent on the lock session, and the last
        # sign of the holder's loop (its heartbeats and waits)
        self.sent_at = 0.0
        self.looped_at = 0.0
        # while the loop computes inside a transaction of the work session (computing()),
        # the keepalive thread may send on it; the guard makes the window's end wait for
        # that statement, so the thread never sends on it outside a window
        self._work_guard = threading.Lock()
        self._work_window = False
        self._work_sent_at = 0.0

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

    def _open(self, application_name: str, **kw: Any) -> tuple[psycopg.Connection, int]:
        conn = db.connect(self.dsn, application_name=application_name, **kw)
        pid = _server_pid(conn)
        # two client connections share a server session only behind a transaction pooler
        if pid == self.lock_pid:
            conn.close()
            raise UnsafeConnection(TRANSACTION_POOLER)
        _call(conn, sql.LIMIT_SESSION, (self.idle_margin,))  # (its code gone: exit 2, not a retry for ever)
        return conn, pid

    def _lock_session(self) -> psycopg.Connection:
        if self.lock_conn is None or self.lock_conn.closed:
            self.lock_pid = None
            self.lock_conn, self.lock_pid = self._open("scrinalia-scheduler lock", server_keepalives=True)
        return self.lock_conn

    def _look(self) -> psycopg.Connection:
        """The standby's other session, for its looks while the lock session waits."""
        self._lock_session()
        if self.look_conn is None or self.look_conn.closed:
            self.look_conn, _ = self._open("scrinalia-scheduler standby")
        return self.look_conn

    def acquire(self, wait: float = 0.0) -> bool:
        """Waits at most `wait` seconds for the lock (the lock session stays in its queue
        between two calls); True when held and the work session is ready."""
        conn = self._lock_session()
        if self._queued is None:
            self._queued = _Queued(conn, self.name)
        if not self._queued.done.wait(wait):
            return False
        q, self._queued = self._queued, None
        if q.error is not None:
            raise q.error
        if not q.got:
            return False  # QUEUE_WAIT ran out: the next call queues again
        # from here on a frozen process frees the lock within the server's idle limit
        self.lock_idle_limit = _call(conn, sql.LIMIT_LOCK_SESSION)["idle"]
        if conn.info.server_version < 140000:
            conn.execute(sql.BEGIN)
            self.lock_in_transaction = True
        self.sent_at = self.looped_at = time.monotonic()
        self._keepalive = _KeepAlive(self)
        self._on_lock(check_schema)  # a deploy may have moved the schema while we stood by
        self.work_conn, self.work_pid = self._open("scrinalia-scheduler")
        self.work_conn.execute(sql.SET_LOCK_TIMEOUT)
        self.work_conn.execute(sql.SET_UTC)
        self.work_conn.execute(sql.LIMIT_WORK_SESSION)
        # the heartbeat recorded, vouching for the work session, before the first pass:
        # each try waits a moment for a state row a dead holder's last tick may hold
        for _ in range(RECORD_TRIES):
            if not self.heartbeat():
                raise UnsafeConnection(TRANSACTION_POOLER)
            if self._on_lock(lambda c: _call(c, sql.LOCK_HOLDER_HEARTBEAT))["heartbeat_pid"] == self.lock_pid:
                break
        else:
            raise LockLost(
                "the heartbeat could not be recorded: the scheduler-state row is held (scheduler_health names by whom)"
            )
        if self.lock_in_transaction:
            self.listen_conn, _ = self._open("scrinalia-scheduler listen", server_keepalives=True)
            self.listen_conn.execute(sql.LISTEN)
        else:
            conn.execute(sql.LISTEN)
        self._close_look()
        return True

    def _on_lock(self, run: Callable[[psycopg.Connection], T]) -> T:
        """`run` on the lock session; on PostgreSQL 13, once the lock is ours, followed by
        COMMIT and BEGIN in one message (ROLLBACK and BEGIN after an error), so that what
        it wrote is seen and the session is never idle outside a transaction."""
        if not self.lock_in_transaction:
            return run(self.lock)
        with self._lock_guard:
            conn = self.lock
            try:
                result = run(conn)
            except BaseException:
                try:
                    conn.execute(sql.ROLLBACK_AND_BEGIN)
                except Exception:  # noqa: BLE001 - the first error is the one to see
                    pass
                raise
            conn.execute(sql.COMMIT_AND_BEGIN)
            return result

    def heartbeat(self) -> bool:
        """True while our lock session holds the lock; records the heartbeat, which
        vouches for the work session (only then may it tick)."""
        self.looped_at = time.monotonic()
        try:
            row = self._heartbeat()
        except psycopg.Error as e:
            if e.sqlstate != NOT_THE_SCHEDULER:
                raise
            # not the holder, or our work session is gone: the lock is not ours to use
            row = {"held": False, "pid": self._on_lock(_server_pid)}
        if row["pid"] != self.lock_pid:  # the pooler handed our statement to another session
            raise UnsafeConnection(TRANSACTION_POOLER)
        return bool(row["held"])

    def _heartbeat(self) -> dict[str, Any]:
        self.sent_at = time.monotonic()
        return self._on_lock(lambda c: _call(c, sql.HEARTBEAT, (self.name, self.work_pid)))

    def keep_alive(self) -> None:
        """A statement on the holder's lock session (the keepalive thread's, and the
        waits' own: a thread waiting for the session's lock behind the waits may wait
        long). Its answer does not matter: the loop's own heartbeat says whether the lock
        is still ours, and a broken session is the loop's to find."""
        try:
            if self.work_pid is None:
                self.sent_at = time.monotonic()
                self._on_lock(lambda c: c.execute(sql.KEEP_ALIVE))
            else:
                self._heartbeat()
        except Exception:  # noqa: BLE001 - the loop meets the same session next
            pass

    @contextmanager
    def computing(self) -> Iterator[None]:
        """A stretch of this process's work (the cron occurrences of a chunk) inside a
        transaction of the work session, which the loop does not use meanwhile: the
        keepalive thread keeps the session from the server's idle-in-transaction limit
        (holder_idle_limit()), which then ends only a frozen holder's transaction."""
        with self._work_guard:
            self._work_window = True
            self._work_sent_at = time.monotonic()
        try:
            yield
        finally:
            with self._work_guard:
                self._work_window = False

    def keep_work_alive(self) -> None:
        """The keepalive thread's statement on the work session, inside a computing()
        window only, at most every KEEPALIVE_EVERY."""
        with self._work_guard:
            if not self._work_window or time.monotonic() - self._work_sent_at < KEEPALIVE_EVERY:
                return
            self._work_sent_at = time.monotonic()
            try:
                self.work.execute(sql.KEEP_ALIVE)
            except Exception:  # noqa: BLE001 - the loop meets the same session next
                pass

    def evict_stale(self, seen_pid: int | None = None) -> dict[str, Any]:
        """scrinalia.evict_lock_holder() from the look session, while the lock session
        waits in the queue: ends a holder that is not a scheduler (`seen_pid`: the one
        seen holding it last time), that does not schedule, or whose heartbeat is stale."""
        return _call(self._look(), sql.EVICT_LOCK_HOLDER, (seen_pid,))

    def holder(self) -> dict[str, Any]:
        """Who holds the lock (scrinalia.scheduler_status())."""
        return _call(self._look(), sql.LOCK_HOLDER_HEARTBEAT)

    def notified(self, timeout: float) -> bool:
        """Waits up to `timeout` seconds for a NOTIFY; True when one came."""
        conn = self.listen_conn if self.listen_conn is not None else self.lock
        came = any(True for _ in conn.notifies(timeout=timeout, stop_after=1))
        self.looped_at = time.monotonic()
        if self.looped_at - self.sent_at >= KEEPALIVE_EVERY:
            self.keep_alive()
        return came

    def release(self) -> None:
        self._on_lock(lambda c: c.execute(sql.RELEASE_LOCK))

    def _close_look(self) -> None:
        if self.look_conn is not None:
            try:
                self.look_conn.close()
            except Exception:  # noqa: BLE001 - closing a broken connection
                pass
        self.look_conn = None

    def close(self) -> None:
        if self._keepalive is not None:
            self._keepalive.end()
            self._keepalive = None
        if self._queued is not None:
            self._queued.cancel()
            self._queued = None
        self._close_look()
        for c in (self.work_conn, self.listen_conn, self.lock_conn):
            if c is not None:
                try:
                    c.close()
                except Exception:  # noqa: BLE001 - closing a broken connection
                    pass
        self.work_conn = self.listen_conn = self.lock_conn = None
        self.lock_in_transaction = False
        self.lock_pid = self.work_pid = None
