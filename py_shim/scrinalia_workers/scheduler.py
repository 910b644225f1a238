"""The scheduler daemon: exactly one ticks, the others wait in standby.

    python -m scrinalia_workers.scheduler --dsn postgresql://scheduler@db/archive

One process holds ``pg_try_advisory_lock(scrinalia.scheduler_lock_key())`` on a
dedicated connection for as long as it lives; a second instance stays in standby and
retries every --standby-retry seconds, so a crashed scheduler is replaced without an
operator and ``restart: always`` does not spin. The lock dies with its connection:
TCP keepalives make that seconds, not hours, after the holder's host vanishes.

A session advisory lock needs a real session: behind a transaction-mode pooler
(PgBouncer pool_mode=transaction) consecutive statements may run on different server
backends and the lock means nothing. At start-up the scheduler checks that the lock
is visible to its own backend and refuses to run otherwise; connect it directly or
through a session-mode pool.

Each tick, on a second connection: reap expired leases, create the owed retries,
then in one transaction lock the due schedules, compute their next occurrences after
the transaction's now() (cron in the schedule's zone, see cron.py) and hand them to
scrinalia.tick() in one call. Then sleep until scrinalia.next_wakeup(), woken early by
NOTIFY scrinalia_scheduler, never longer than --max-sleep. The database decides; this
process only computes occurrences and holds the lock. If the lock connection breaks,
ticking stops at once and the process goes back to standby.
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import socket
import sys
import time
from datetime import datetime

import psycopg

from . import cron
from .db import connect, require_dsn
from .errors import ConfigError, SchemaMismatch, ScrinaliaError
from .logs import EventLog
from .schema import check_schema

LOCK_HELD = """
SELECT EXISTS (
    SELECT 1 FROM pg_catalog.pg_locks
     WHERE locktype = 'advisory' AND granted AND pid = pg_catalog.pg_backend_pid()
       AND objsubid = 1 AND ((classid::bigint << 32) | objid::bigint) = scrinalia.scheduler_lock_key())
"""


class LockLost(Exception):
    """The lock connection broke or no longer holds the lock: stop ticking now."""


class UnsafeConnection(ScrinaliaError):
    """The connection cannot hold a session lock (a transaction-mode pooler)."""


class Scheduler:
    def __init__(self, dsn: str, *, name: str | None = None, standby_retry: float = 3.0,
                 max_sleep: float = 5.0, log: EventLog | None = None):
        self.dsn = dsn
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        self.standby_retry = standby_retry
        self.max_sleep = max_sleep
        self.log = log or EventLog("scheduler")
        self.stopping = False
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._unusable: dict[str, tuple[str, str]] = {}  # worker -> (cron, tz) already reported

    # -- life cycle ---------------------------------------------------------------

    def stop(self, *_args) -> None:
        self.stopping = True
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)

    def run(self) -> int:
        """Standby, lead, and back, until stopped. Returns the exit code."""
        backoff = 0.5
        while not self.stopping:
            lock_conn = None
            try:
                lock_conn = self._acquire()
                if lock_conn is None:
                    break
                backoff = 0.5
                self._lead(lock_conn)
            except LockLost as e:
                self.log("lock lost", reason=str(e))
            except ConfigError as e:
                self.log("database unavailable", error=str(e), retry_in=round(backoff, 1))
                self._pause(backoff)
                backoff = min(backoff * 2, self.standby_retry)
            except psycopg.OperationalError as e:
                self.log("connection lost", error=_one_line(e), retry_in=round(backoff, 1))
                self._pause(backoff)
                backoff = min(backoff * 2, self.standby_retry)
            finally:
                if lock_conn is not None:
                    _close(lock_conn)
        self.log("stopping", name=self.name)
        return 0

    def _acquire(self) -> psycopg.Connection | None:
        """Waits in standby until the lock is ours; None when stopped meanwhile."""
        said_standby = False
        while not self.stopping:
            conn = connect(self.dsn, application_name="scrinalia-scheduler lock")
            try:
                check_schema(conn)
                got = conn.execute("SELECT pg_try_advisory_lock(scrinalia.scheduler_lock_key())").fetchone()[0]
                if got:
                    if not conn.execute(LOCK_HELD).fetchone()[0]:
                        raise UnsafeConnection(
                            "the advisory lock is not visible to this connection's own server "
                            "session: a transaction-mode pooler? connect the scheduler directly "
                            "or through a session-mode pool"
                        )
                    conn.execute("LISTEN scrinalia_scheduler")
                    self.log("lock acquired", name=self.name, backend_pid=conn.info.backend_pid)
                    return conn
            except BaseException:
                _close(conn)
                raise
            _close(conn)
            if not said_standby:
                self.log("standby", name=self.name, retry_every=self.standby_retry)
                said_standby = True
            self._pause(self.standby_retry)
        return None

    def _lead(self, lock_conn: psycopg.Connection) -> None:
        with connect(self.dsn, application_name="scrinalia-scheduler") as work:
            while not self.stopping:
                self._check_lock(lock_conn)
                progressed = self.tick(work)
                wait = self._seconds_to_wakeup(work, progressed)
                self._sleep(lock_conn, wait)
        # leaving: release explicitly (closing the connection would too)
        try:
            lock_conn.execute("SELECT pg_advisory_unlock(scrinalia.scheduler_lock_key())")
        except psycopg.Error:
            pass

    def _check_lock(self, lock_conn: psycopg.Connection) -> None:
        try:
            held = lock_conn.execute(LOCK_HELD).fetchone()[0]
        except psycopg.Error as e:
            raise LockLost(_one_line(e)) from None
        if not held:
            raise LockLost("the advisory lock is no longer held by this session")

    # -- the tick -----------------------------------------------------------------

    def tick(self, conn: psycopg.Connection) -> bool:
        """One tick; True if it did anything (so that the loop may come back at once)."""
        did = False
        for r in conn.execute(
            "SELECT run_id, worker_name, lease_owner, attempt, trigger FROM scrinalia.reap_expired_leases()"
        ):
            did = True
            self.log("lease reaped", run_id=r[0], worker=r[1], runner=r[2], attempt=r[3], trigger=r[4],
                     status="INTERRUPTED")
        for r in conn.execute(
            "SELECT run_id, retry_of, worker_name, attempt, not_before FROM scrinalia.create_retries()"
        ):
            did = True
            self.log("retry created", run_id=r[0], retry_of=r[1], worker=r[2], attempt=f"{r[3]}/3",
                     not_before=r[4])
        with conn.transaction():
            due = conn.execute(
                "SELECT worker_name, cron, timezone, next_run_at, db_now FROM scrinalia.due_schedules()"
            ).fetchall()
            if not due:
                return did
            now = due[0][4]
            names, nexts, missed = self._occurrences(due, now)
            decisions = conn.execute(
                "SELECT worker_name, decision, run_id, scheduled_for, next_run_at, reason "
                "FROM scrinalia.tick(%s::text[], %s::timestamptz[], %s)",
                (names, nexts, self.name),
            ).fetchall()
        for worker, decision, run_id, scheduled_for, next_at, reason in decisions:
            did = True
            if decision == "ENQUEUED":
                self.log("enqueued", worker=worker, run_id=run_id, scheduled_for=scheduled_for,
                         next_run_at=next_at, catch_up=True if worker in missed else None)
            elif decision == "SKIPPED":
                self.log("skipped", worker=worker, scheduled_for=scheduled_for, reason=reason,
                         next_run_at=next_at)
            else:
                self.log("armed", worker=worker, next_run_at=next_at)
        return did

    def _occurrences(self, due, now: datetime):
        """Next occurrences after `now`, one per distinct (cron, zone); the set of
        workers that missed more than one period (a catch-up)."""
        memo: dict[tuple, datetime | Exception] = {}
        names, nexts, missed = [], [], set()

        def occurrence(expr, tz, after):
            key = (expr, tz, after)
            if key not in memo:
                try:
                    memo[key] = cron.next_occurrence(expr, tz, after)
                except (ValueError, KeyError) as e:
                    memo[key] = e
            return memo[key]

        for worker, expr, tz, was, _ in due:
            nxt = occurrence(expr, tz, now)
            if isinstance(nxt, Exception):
                if self._unusable.get(worker) != (expr, tz):
                    self._unusable[worker] = (expr, tz)
                    self.log("tick error", worker=worker, cron=expr, timezone=tz, error=str(nxt))
                continue
            names.append(worker)
            nexts.append(nxt)
            if was is not None:
                second = occurrence(expr, tz, was)
                if not isinstance(second, Exception) and second <= now:
                    missed.add(worker)
        return names, nexts, missed

    # -- sleeping -----------------------------------------------------------------

    def _seconds_to_wakeup(self, conn: psycopg.Connection, progressed: bool) -> float:
        wake = conn.execute(
            "SELECT extract(epoch FROM scrinalia.next_wakeup() - clock_timestamp())"
        ).fetchone()[0]
        # Work still "due" after a tick that did nothing is locked by someone else
        # (an open put_schedule, say): look again soon, but do not spin.
        floor = 0.0 if progressed else 0.25
        if wake is None:
            return self.max_sleep
        return max(floor, min(float(wake), self.max_sleep))

    def _sleep(self, lock_conn: psycopg.Connection, seconds: float) -> None:
        """Until `seconds` pass, a NOTIFY arrives, a signal comes, or the lock
        connection says anything else (its death included)."""
        if seconds <= 0 or self.stopping:
            return
        try:
            ready, _, _ = select.select([lock_conn.fileno(), self._wake_r], [], [], seconds)
        except InterruptedError:
            return
        if self._wake_r in ready:
            _drain(self._wake_r)
        if lock_conn.fileno() in ready:
            try:
                for _ in lock_conn.notifies(timeout=0.0):
                    pass
            except psycopg.Error as e:
                raise LockLost(_one_line(e)) from None

    def _pause(self, seconds: float) -> None:
        if not self.stopping:
            ready, _, _ = select.select([self._wake_r], [], [], seconds)
            if ready:
                _drain(self._wake_r)


def _drain(sock: socket.socket) -> None:
    try:
        while sock.recv(512):
            pass
    except BlockingIOError:
        pass


def _close(conn: psycopg.Connection) -> None:
    try:
        conn.close()
    except Exception:  # noqa: BLE001 - closing a broken connection
        pass


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="scrinalia-scheduler", description=__doc__.split("\n\n")[0])
    p.add_argument("--dsn", help="libpq DSN or URL (default: DATABASE_URL or the PG* variables)")
    p.add_argument("--name", help="recorded as the tick's author (default host:pid)")
    p.add_argument("--standby-retry", type=float, default=float(os.environ.get("SCRINALIA_STANDBY_RETRY", 3)),
                   help="seconds between lock attempts in standby (default 3)")
    p.add_argument("--max-sleep", type=float, default=float(os.environ.get("SCRINALIA_MAX_SLEEP", 5)),
                   help="the longest sleep between ticks, a safety net under NOTIFY (default 5)")
    p.add_argument("--json", action="store_true", default=os.environ.get("SCRINALIA_LOG_JSON") == "1",
                   help="log JSON objects, one per line")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    log = EventLog("scheduler", as_json=args.json)
    if args.standby_retry <= 0 or args.max_sleep <= 0:
        log("error", error="--standby-retry and --max-sleep must be positive")
        return 2
    try:
        dsn = require_dsn(args.dsn)
        with connect(dsn, application_name="scrinalia-scheduler check") as conn:
            check_schema(conn)
    except (SchemaMismatch, ConfigError) as e:
        log("error", error=str(e))
        print(f"scrinalia-scheduler: error: {e}", file=sys.stderr)
        return 2
    s = Scheduler(dsn, name=args.name, standby_retry=args.standby_retry, max_sleep=args.max_sleep, log=log)
    s.install_signal_handlers()
    try:
        return s.run()
    except SchemaMismatch as e:
        log("error", error=str(e))
        return 2
    except ScrinaliaError as e:
        log("error", error=str(e))
        return 1


if __name__ == "__main__":
    sys.exit(main())
