"""An actor's database session whose statements run one step at a time, each on the
session's own thread, so that a step blocked on a lock is seen (pg_blocking_pids)
and the other actors go on meanwhile.

A step's outcome is what the session answered: ("ok", value), ("error", SQLSTATE),
("lost", None) when the session was ended under it (a crash), or ("cancelled", None)
when it was still blocked once the others were done."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

import psycopg

# How long one step may run before the harness calls it hung (a step of ours takes
# milliseconds; only a lock wait is longer, and that is seen as blocked).
STEP_HUNG_AFTER = 20.0
POLL = 0.005

Outcome = tuple[str, Any]


class Hung(Exception):
    """A step neither finished nor waited on a lock for STEP_HUNG_AFTER seconds."""


class Session:
    """A real psycopg connection as one login (autocommit: the steps open and commit
    their own transactions), reopened when a crash ended it."""

    def __init__(self, name: str, dsn: str, application_name: str):
        self.name = name
        self.dsn = dsn
        self.application_name = application_name
        self.conn: psycopg.Connection | None = None
        self.pid: int | None = None
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"explore-{name}")
        self.pending: Future[Any] | None = None
        self.pending_step: str | None = None
        # the server pids of connections this session closed: their backends end (and
        # their transactions roll back) a moment later, which the harness awaits
        self.ended: list[int] = []

    def open(self) -> psycopg.Connection:
        if self.conn is None or self.conn.closed or self.conn.broken:
            self.close()
            self.conn = psycopg.connect(self.dsn, autocommit=True, application_name=self.application_name)
            self.pid = self.conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        return self.conn

    @property
    def alive(self) -> bool:
        return self.conn is not None and not self.conn.closed and not self.conn.broken

    def close(self) -> None:
        if self.pid is not None:
            self.ended.append(self.pid)
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:  # noqa: BLE001 - closing an ended session
                pass
        self.conn = None
        self.pid = None

    def start(self, step: str, fn: Callable[[psycopg.Connection], Any]) -> None:
        """Sends the step's statements on the session's thread."""
        conn = self.open()
        self.pending_step = step
        self.pending = self._thread.submit(fn, conn)

    def settle(self, admin: psycopg.Connection) -> Outcome | None:
        """Waits until the pending step finished (its outcome) or waits on a lock
        another session holds (None: still pending)."""
        assert self.pending is not None
        deadline = time.monotonic() + STEP_HUNG_AFTER
        while True:
            # (a step that ends within POLL is answered without asking who blocks it)
            if wait([self.pending], timeout=POLL).done:
                return self._finish()
            pid = self.pid
            if pid is not None and admin.execute("SELECT cardinality(pg_blocking_pids(%s)) > 0", (pid,)).fetchone()[0]:
                # (it may have finished meanwhile: then its outcome, not a block)
                return self._finish() if self.pending.done() else None
            if time.monotonic() > deadline:
                raise Hung(f"{self.name}: {self.pending_step} neither finished nor waited on a lock")

    def _finish(self) -> Outcome:
        assert self.pending is not None
        future, self.pending, self.pending_step = self.pending, None, None
        error = future.exception()
        if error is None:
            return ("ok", future.result())
        if isinstance(error, psycopg.Error) and self.conn is not None and not (self.conn.broken or self.conn.closed):
            if self.conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
                self.conn.rollback()
            if error.sqlstate == "57014":  # query_canceled
                return ("cancelled", None)
            return ("error", error.sqlstate)
        if isinstance(error, psycopg.OperationalError | psycopg.InterfaceError):
            self.close()
            return ("lost", None)
        raise error

    def cancel(self, admin: psycopg.Connection) -> Outcome:
        """Ends a step still blocked once no other actor can unblock it."""
        assert self.conn is not None and self.pending is not None
        self.conn.cancel()
        self.pending.exception(timeout=STEP_HUNG_AFTER)
        return self._finish()

    def reset(self) -> None:
        """Between two interleavings: no transaction open, no advisory lock held."""
        if not self.alive:
            self.close()
            return
        assert self.conn is not None
        try:
            if self.conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                self.conn.rollback()
            self.conn.execute("SELECT pg_advisory_unlock_all()")
        except psycopg.Error:
            self.close()

    def shutdown(self) -> None:
        self.close()
        self._thread.shutdown(wait=True)
