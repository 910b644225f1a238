"""The scheduler daemon: exactly one instance ticks, decided by an advisory lock.

    python -m scrinalia_workers.scheduler [--dsn DSN] [--json] ...

A dedicated connection holds pg_try_advisory_lock(scrinalia.scheduler_lock_key())
for the process lifetime; another instance stays in standby and retries every
--standby-retry seconds. The lock is session-scoped, so the connection must be
direct or through a session-mode pooler: behind a transaction-mode pooler (e.g.
PgBouncer pool_mode=transaction) the lock would land on a backend we do not keep.
After acquiring it we check that pg_locks shows it held by our own pg_backend_pid();
if not, we refuse to run. Before every tick the lock is checked again; when the lock
connection is gone the scheduler stops ticking at once and goes back to standby.

Each tick, on a separate work connection, in short transactions: reap expired
leases, create retries, then due_schedules() + cron next occurrences + tick() in one
transaction. Then it sleeps until scrinalia.next_wakeup() (at most --max-sleep),
woken early by NOTIFY scrinalia_scheduler.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import threading
import time
from datetime import datetime

import psycopg

from . import cron, db
from .errors import ConfigError, SchemaMismatch
from .logs import EventLog, one_line, startup_error
from .schema import preflight

EXIT_CONFIG = 2

_HOLDS_LOCK = (
    "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_locks l WHERE l.locktype = 'advisory'"
    " AND l.granted AND l.pid = pg_backend_pid() AND l.objsubid = 1"
    " AND ((l.classid::bigint << 32) | l.objid::bigint) = scrinalia.scheduler_lock_key())"
)


class LockLost(Exception):
    pass


class UnsafeConnection(ConfigError):
    """The lock connection cannot hold a session lock (a transaction-mode pooler)."""


class _Occurrences:
    """cron.next_occurrence, computed once per (expr, zone, after) within a tick: a
    tick of 100,000 schedules shares a few hundred of them. Failures are kept too."""

    def __init__(self):
        self._memo: dict[tuple, datetime | Exception] = {}

    def __call__(self, expr: str, tz: str, after: datetime) -> datetime:
        key = (expr, tz, after)
        if key not in self._memo:
            try:
                self._memo[key] = cron.next_occurrence(expr, tz, after)
            except (ValueError, LookupError) as e:
                self._memo[key] = e
        r = self._memo[key]
        if isinstance(r, Exception):
            raise r
        return r


class Scheduler:
    def __init__(self, dsn: str, *, name: str | None = None, standby_retry: float = 3.0,
                 max_sleep: float = 5.0, log: EventLog | None = None):
        self.dsn = dsn
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        self.standby_retry = standby_retry
        self.max_sleep = max_sleep
        self.log = log or EventLog()
        self.stop = threading.Event()
        self.lock_conn: psycopg.Connection | None = None
        self.work_conn: psycopg.Connection | None = None

    # --- connections and the lock ------------------------------------------------

    def _close(self) -> None:
        for c in (self.work_conn, self.lock_conn):
            if c is not None:
                try:
                    c.close()
                except Exception:
                    pass
        self.work_conn = self.lock_conn = None

    def _acquire(self) -> bool:
        """One attempt at the lock; True when held (and the connections are ready)."""
        self.lock_conn = db.connect(self.dsn, application_name="scrinalia-scheduler lock",
                                    server_keepalives=True)
        got = self.lock_conn.execute(
            "SELECT pg_try_advisory_lock(scrinalia.scheduler_lock_key())").fetchone()[0]
        if not got:
            self._close()
            return False
        if not self.lock_conn.execute(_HOLDS_LOCK).fetchone()[0]:
            raise UnsafeConnection("the advisory lock is not held by this connection's backend: a "
                              "transaction-mode pooler is in the way; connect directly or use "
                              "a session-mode pool")
        self.lock_conn.execute("LISTEN scrinalia_scheduler")
        self.work_conn = db.connect(self.dsn, application_name="scrinalia-scheduler")
        return True

    def _check_lock(self) -> None:
        try:
            ok = self.lock_conn.execute(_HOLDS_LOCK).fetchone()[0]
        except psycopg.Error as e:
            raise LockLost(one_line(e)) from e
        if not ok:
            raise LockLost("the lock is no longer held by our backend")

    # --- the tick -------------------------------------------------------------------

    def tick(self) -> None:
        conn = self.work_conn
        for r in conn.execute("SELECT run_id, worker_name, lease_owner, error FROM scrinalia.reap_expired_leases()"):
            self.log("lease reaped", run_id=r[0], worker=r[1], runner=r[2], reason=r[3])
        for r in conn.execute("SELECT run_id, retry_of, worker_name, attempt, not_before FROM scrinalia.create_retries()"):
            self.log("retry created", run_id=r[0], retry_of=r[1], worker=r[2], attempt=r[3],
                     not_before=r[4].isoformat())
        with conn.transaction():
            due = conn.execute(
                "SELECT worker_name, cron, timezone, next_run_at, db_now FROM scrinalia.due_schedules()"
            ).fetchall()
            if not due:
                return
            db_now = due[0][4]
            occurrence = _Occurrences()
            names, nexts, exprs = [], [], {}
            for worker, expr, tz, _was, _ in due:
                try:
                    nxt = occurrence(expr, tz, db_now)
                except (ValueError, LookupError) as e:
                    # one bad schedule must not block the others
                    self.log("tick error", level="error", worker=worker, cron=expr, timezone=tz,
                             reason=f"cannot evaluate the schedule here: {e}")
                    continue
                names.append(worker)
                nexts.append(nxt)
                exprs[worker] = (expr, tz)
            if not names:
                return
            rows = conn.execute(
                "SELECT worker_name, decision, run_id, scheduled_for, next_run_at, reason"
                " FROM scrinalia.tick(%s::text[], %s::timestamptz[], %s)", (names, nexts, self.name),
            ).fetchall()
        for worker, decision, run_id, sched_for, nxt, reason in rows:
            nxt_s = nxt.isoformat() if nxt else None
            if decision == "ARMED":
                self.log("armed", worker=worker, next_run_at=nxt_s)
            elif decision == "ENQUEUED":
                expr, tz = exprs[worker]
                catch_up = occurrence(expr, tz, sched_for) <= db_now
                self.log("enqueued", worker=worker, run_id=run_id, scheduled_for=sched_for.isoformat(),
                         next_run_at=nxt_s, catch_up=catch_up)
                if catch_up:
                    self.log("catch-up", worker=worker, run_id=run_id, scheduled_for=sched_for.isoformat(),
                             reason="periods were missed: one run, not a replay")
            else:
                self.log("skipped", worker=worker, scheduled_for=sched_for.isoformat() if sched_for else None,
                         next_run_at=nxt_s, reason=reason)

    def _sleep(self) -> None:
        wake = self.work_conn.execute(
            "SELECT extract(epoch FROM scrinalia.next_wakeup() - now())").fetchone()[0]
        delay = self.max_sleep if wake is None else min(max(float(wake), 0.005), self.max_sleep)
        # wake up early on NOTIFY scrinalia_scheduler (put_schedule, finish, reap...)
        deadline = time.monotonic() + delay
        while not self.stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            for _ in self.lock_conn.notifies(timeout=min(left, 0.5), stop_after=1):
                return

    # --- the loop ----------------------------------------------------------------

    def run(self) -> int:
        backoff = 0.2
        standby_logged = False
        while not self.stop.is_set():
            try:
                if not self._acquire():
                    if not standby_logged:
                        self.log("standby", name=self.name, retry_every=self.standby_retry,
                                 reason="another scheduler holds the lock")
                        standby_logged = True
                    self.stop.wait(self.standby_retry)
                    continue
                standby_logged = False
                backoff = 0.2
                self.log("lock acquired", name=self.name)
                while not self.stop.is_set():
                    self._check_lock()
                    try:
                        self.tick()
                    except psycopg.OperationalError:
                        raise
                    except psycopg.Error as e:
                        self.log("tick error", level="error", sqlstate=e.sqlstate,
                                 reason=one_line(e))
                        if self.work_conn.closed:
                            raise
                    self._sleep()
            except LockLost as e:
                self.log("lock lost", level="warning", name=self.name, reason=str(e))
                self._close()
                self.stop.wait(backoff)
                backoff = min(backoff * 2, self.standby_retry)
            except UnsafeConnection:
                raise
            except (psycopg.OperationalError, ConfigError) as e:
                was_holding = self.work_conn is not None
                self.log("lock lost" if was_holding else "standby", level="warning", name=self.name,
                         reason=f"database unavailable: {one_line(e)}")
                self._close()
                self.stop.wait(backoff)
                backoff = min(backoff * 2, self.standby_retry)
        self.log("stopping", name=self.name)
        if self.lock_conn is not None:
            try:
                self.lock_conn.execute("SELECT pg_advisory_unlock(scrinalia.scheduler_lock_key())")
            except psycopg.Error:
                pass
        self._close()
        return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="scrinalia-scheduler", description="the one-instance cron scheduler")
    p.add_argument("--dsn", help="database (else DATABASE_URL or the PG* variables)")
    p.add_argument("--standby-retry", type=float, default=3.0, metavar="SECONDS")
    p.add_argument("--max-sleep", type=float, default=5.0, metavar="SECONDS")
    p.add_argument("--name", help="recorded as the ticker (default host:pid)")
    p.add_argument("--json", action="store_true", help="JSON log lines")
    p.add_argument("--log-level", default="info", type=str.lower, choices=["debug", "info", "warning", "error"],
                   help="case-insensitive: debug, info, warning, error")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    log = EventLog(json_lines=args.json, level=args.log_level)
    if args.standby_retry <= 0 or args.max_sleep <= 0:
        log("config error", level="error", reason="--standby-retry and --max-sleep must be positive")
        return EXIT_CONFIG
    try:
        dsn = preflight(args.dsn, "scrinalia-scheduler check")
    except (ConfigError, SchemaMismatch) as e:
        startup_error(log, "scrinalia-scheduler", args.json, e)
        return EXIT_CONFIG
    sched = Scheduler(dsn, name=args.name, standby_retry=args.standby_retry,
                      max_sleep=args.max_sleep, log=log)

    def _stop(signum, frame):
        sched.stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        return sched.run()
    except ConfigError as e:
        print(f"scrinalia-scheduler: {one_line(e)}", file=sys.stderr)
        return EXIT_CONFIG


if __name__ == "__main__":
    sys.exit(main())
