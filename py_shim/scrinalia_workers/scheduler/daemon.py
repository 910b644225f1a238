"""The scheduler daemon: exactly one instance ticks, decided by an advisory lock.

    python -m scrinalia_workers.scheduler [--dsn DSN] [--json] ...

A dedicated *lock session* holds pg_try_advisory_lock(scrinalia.scheduler_lock_key())
for the process lifetime and LISTENs for work; another instance stays in standby
and retries every --standby-retry seconds. The lock is session-scoped, so the
connection must be direct or through a session-mode pooler: behind a
transaction-mode pooler the lock would land on a backend we do not keep, and the
scheduler refuses to run.

Any login can take any advisory lock key or send a NOTIFY, so:
- before every pass the lock session calls scrinalia.scheduler_heartbeat(), which
  says whether this session holds the lock and records a heartbeat only the holder
  can write; scheduler_health() reads it;
- a standby logs who holds the key (at a bounded rate, loudly when the holder is not
  a scheduler) and ends a holder whose heartbeat is stale through
  scrinalia.evict_stale_scheduler() (a frozen scheduler, a squatter);
- NOTIFY wake-ups are coalesced and rate-limited (--min-wake-interval).

Each pass, on a separate *work session*: reap expired leases, create retries, then
the due schedules in chunks of TICK_CHUNK, each chunk one transaction: check the lock,
due_schedules(TICK_CHUNK) + the cron next occurrences + tick(), commit. Runs become
visible chunk by chunk (a spike of 10,000 due at one instant does not wait for the last
one), the heartbeat is written between chunks, and a chunk that fails rolls back alone.
A schedule whose next occurrence cannot be computed here is set aside
(scrinalia.set_schedules_aside) and retried later; the others fire regardless.
"""

from __future__ import annotations

import argparse
import bisect
import os
import signal
import socket
import threading
import time
from datetime import datetime, timedelta
from typing import NamedTuple

import psycopg
from psycopg.rows import dict_row

from scrinalia_workers import argtypes, cron
from scrinalia_workers.errors import (
    NOT_LOCK_HOLDER,
    ConfigError,
    LockLost,
    UnsafeConnection,
)
from scrinalia_workers.gateway import connection as db
from scrinalia_workers.gateway.backoff import Backoff, is_transient
from scrinalia_workers.gateway.checks import check_schema, preflight
from scrinalia_workers.logs import EventLog, one_line, startup_error

EXIT_CONFIG = 2


# Every function the scheduler calls: checked at start-up, so that a login without
# them gets one line and exit 2 instead of a crash loop.
REQUIRED_FUNCTIONS = (
    "scheduler_lock_key()",
    "scheduler_heartbeat(text, integer)",
    "check_scheduler_lock(integer)",
    "scheduler_status()",
    "evict_stale_scheduler()",
    "reap_expired_leases()",
    "create_retries()",
    "due_schedules(integer)",
    "set_schedules_aside(text[], text[])",
    "tick(text[], timestamp with time zone[], text)",
    "tick_due_at(timestamp with time zone, text[], timestamp with time zone[], text)",
    "schedules_due_at(timestamp with time zone, integer)",
    "next_wakeup()",
)
# the first is the least-privilege choice; ADR 0015 lets the API's and a runner's login run it too
GROUPS = ("scrinalia_scheduler", "scrinalia_operator", "scrinalia_runner")

# After a pass that found work it could not take (schedule rows locked by another
# transaction), wait this long rather than spin on a due instant in the past.
NO_PROGRESS_SLEEP = 0.5
# The shortest sleep: the due instant is computed by the database, we may wake a hair early.
MIN_SLEEP = 0.005
# How often a standby repeats who holds the lock when nothing changed.
HOLDER_REPORT_EVERY = 60.0
# How long one wait on the socket lasts before the stop flag is looked at again.
POLL_SLICE = 0.2
# Due schedules per tick transaction. Each chunk costs a transaction, a due query over
# all that is still due and a planning: measured on 2 cores, 10,000 due at one instant
# were all visible after 0.51 s in one transaction, 0.55 s in chunks of 2,500, 0.66 s
# in chunks of 1,000. A minute's usual load fits in one; a spike's first half is
# visible about twice as early as its last.
TICK_CHUNK = 5000
# How long before a due instant the prepared tick is sent (scrinalia.tick_due_at, at
# most scrinalia.max_tick_ahead()): enough for its work on a busy machine, so that
# only the COMMIT is left for the instant; the slots are taken this much early.
# TICK_AHEAD, plus AHEAD_PER_SCHEDULE for each schedule it ticks (measured on 2 cores:
# 10,000 in 0.2 s; twice that here), for at most PREPARED_LIMIT schedules (0.65 s,
# inside max_tick_ahead()): a spike of 10,000 is visible whole at its instant, and
# what is beyond the limit goes to the ordinary pass after it.
TICK_AHEAD = 0.25
AHEAD_PER_SCHEDULE = 40e-6
PREPARED_LIMIT = 10_000
# Chunks per pass at most (a million schedules); the next pass goes on at once.
MAX_CHUNKS = 1000


TRANSACTION_POOLER = (
    "the scheduler's two sessions are not its own: a transaction-mode pooler is in the "
    "way (the advisory lock is per session); connect directly or through a "
    "session-mode pool"
)


def _server_pid(conn: psycopg.Connection) -> int:
    return conn.execute("SELECT pg_backend_pid()").fetchone()[0]


class _Prepared(NamedTuple):
    """The tick of the schedules due at `due_at`, computed while waiting for it."""

    due_at: datetime
    ready: float  # time.monotonic() at due_at, as this process sees it
    workers: list[str]
    nexts: list[datetime]
    crons: dict[str, tuple[str, str]]

    @property
    def ahead(self) -> float:
        """How long before `ready` the tick is sent."""
        return ahead_of(len(self.workers))


def ahead_of(schedules: int) -> float:
    """The lead of a prepared tick of that many schedules."""
    return TICK_AHEAD + AHEAD_PER_SCHEDULE * min(schedules, PREPARED_LIMIT)


class Scheduler:
    def __init__(
        self,
        dsn: str,
        *,
        name: str | None = None,
        standby_retry: float = 3.0,
        max_sleep: float = 5.0,
        min_wake_interval: float = 0.2,
        log: EventLog | None = None,
    ):
        self.dsn = dsn
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        self.standby_retry = standby_retry
        self.max_sleep = max_sleep
        self.min_wake_interval = min_wake_interval
        self.log = log or EventLog()
        self.stop = threading.Event()
        self.lock_conn: psycopg.Connection | None = None
        self.work_conn: psycopg.Connection | None = None
        self.lock_pid: int | None = None
        self.work_pid: int | None = None
        self.passes = 0
        self._last_pass = 0.0
        self._prepared: _Prepared | None = None
        self._holder_seen: tuple | None = None
        self._holder_logged_at = 0.0

    # --- connections and the lock ------------------------------------------------

    def _close(self) -> None:
        for c in (self.work_conn, self.lock_conn):
            if c is not None:
                try:
                    c.close()
                except Exception:  # noqa: BLE001 - closing a broken connection
                    pass
        self.work_conn = self.lock_conn = None
        self.lock_pid = self.work_pid = None

    def _lock_session(self) -> psycopg.Connection:
        if self.lock_conn is None or self.lock_conn.closed:
            self.lock_conn = db.connect(self.dsn, application_name="scrinalia-scheduler lock", server_keepalives=True)
            # the server's pid, not libpq's: behind a pooler they differ
            self.lock_pid = _server_pid(self.lock_conn)
        return self.lock_conn

    def _acquire(self) -> bool:
        """One attempt at the lock; True when held (and the work session is ready)."""
        conn = self._lock_session()
        got = conn.execute("SELECT pg_try_advisory_lock(scrinalia.scheduler_lock_key())").fetchone()[0]
        if not got:
            return False
        check_schema(conn)  # a deploy may have moved the schema while we stood by
        self.work_conn = db.connect(self.dsn, application_name="scrinalia-scheduler")
        # a tick must never hang behind a row lock of a frozen peer (see evict_stale_scheduler)
        self.work_conn.execute("SET lock_timeout = '10s'")
        self.work_pid = _server_pid(self.work_conn)
        # two client connections share a server session only behind a transaction pooler
        if self.work_pid == self.lock_pid or not self._heartbeat():
            raise UnsafeConnection(TRANSACTION_POOLER)
        conn.execute("LISTEN scrinalia_scheduler")
        return True

    def _heartbeat(self) -> bool:
        """True while our lock session holds the lock; records the heartbeat."""
        held, pid = self.lock_conn.execute(
            "SELECT scrinalia.scheduler_heartbeat(%s, %s), pg_backend_pid()", (self.name, self.work_pid)
        ).fetchone()
        if pid != self.lock_pid:  # the pooler handed our statement to another session
            raise UnsafeConnection(TRANSACTION_POOLER)
        return held

    def _check_lock(self) -> None:
        try:
            held = self._heartbeat()
        except psycopg.Error as e:
            raise LockLost(one_line(e)) from e
        if not held:
            raise LockLost("the lock is no longer held by our session")

    # --- standby -------------------------------------------------------------------

    def _stand_by(self) -> None:
        """Someone else holds the lock: say who (at a bounded rate), and end its
        session if it is stale (frozen, or not a scheduler at all)."""
        conn = self.lock_conn
        ev = (
            conn.cursor(row_factory=dict_row)
            .execute("SELECT evicted, holder_pid, holder_role, reason FROM scrinalia.evict_stale_scheduler()")
            .fetchone()
        )
        if ev["evicted"]:
            self.log(
                "stale holder evicted",
                level="warning",
                name=self.name,
                holder_pid=ev["holder_pid"],
                holder_role=ev["holder_role"],
                reason=ev["reason"],
            )
            return
        st = (
            conn.cursor(row_factory=dict_row)
            .execute(
                "SELECT holder_pid, holder_role, holder_application, holder_backend_start, holder_is_scheduler,"
                " heartbeat_at FROM scrinalia.scheduler_status()"
            )
            .fetchone()
        )
        seen = (st["holder_pid"], st["holder_role"], st["holder_is_scheduler"])
        now = time.monotonic()
        if seen == self._holder_seen and now - self._holder_logged_at < HOLDER_REPORT_EVERY:
            return
        self._holder_seen, self._holder_logged_at = seen, now
        holder = dict(
            holder_pid=st["holder_pid"],
            holder_role=st["holder_role"],
            holder_application=st["holder_application"],
            holder_since=st["holder_backend_start"],
            heartbeat_at=st["heartbeat_at"],
            retry_every=self.standby_retry,
        )
        if st["holder_pid"] is not None and not st["holder_is_scheduler"]:
            self.log(
                "standby",
                level="error",
                name=self.name,
                **holder,
                reason="the scheduler lock is held by a login that is NOT a scheduler: nothing ticks "
                "while it holds it; it is ended once stale (" + (ev["reason"] or "") + ")",
            )
        else:
            self.log("standby", name=self.name, **holder, reason="another scheduler holds the lock")

    # --- one pass --------------------------------------------------------------------

    def tick(self) -> bool:
        """One pass: reap, retries, then the due schedules. True when it decided anything."""
        self.passes += 1
        self._last_pass = time.monotonic()
        self.log("pass", level="debug", n=self.passes)
        conn = self.work_conn
        # binary results, and the arrays below sent binary (%b): psycopg writes 10,000
        # timestamps as text in about 30 ms, as binary in about 3
        cur = conn.cursor(row_factory=dict_row, binary=True)
        progressed = False
        for r in cur.execute("SELECT run_id, worker_name, lease_owner, error FROM scrinalia.reap_expired_leases()"):
            progressed = True
            self.log(
                "lease reaped", run_id=r["run_id"], worker=r["worker_name"], runner=r["lease_owner"], reason=r["error"]
            )
        for r in cur.execute(
            "SELECT run_id, retry_of, worker_name, attempt, not_before FROM scrinalia.create_retries()"
        ):
            progressed = True
            self.log(
                "retry created",
                run_id=r["run_id"],
                retry_of=r["retry_of"],
                worker=r["worker_name"],
                attempt=r["attempt"],
                not_before=r["not_before"].isoformat(),
            )
        occurrences = _Occurrences()  # shared by the chunks of this pass and their log
        for n in range(MAX_CHUNKS):
            if n:
                self._check_lock()  # the heartbeat, and a lost lock stops the pass between chunks
            decided, full = self._tick_chunk(cur, occurrences)
            progressed = progressed or decided
            if not (full and decided):
                break
        return progressed

    def _tick_chunk(self, cur, occurrences: _Occurrences) -> tuple[bool, bool]:
        """One tick transaction over at most TICK_CHUNK due schedules. Returns (decided
        anything, the chunk was full: more may be due)."""
        conn = self.work_conn
        with conn.transaction():
            try:
                cur.execute("SELECT scrinalia.check_scheduler_lock(%s)", (self.lock_pid,))
            except psycopg.Error as e:
                if e.sqlstate == NOT_LOCK_HOLDER:
                    raise LockLost(e.diag.message_primary) from None
                raise
            due = cur.execute(
                "SELECT worker_name, cron, timezone, db_now FROM scrinalia.due_schedules(%s)", (TICK_CHUNK,)
            ).fetchall()
            if not due:
                return False, False
            db_now = due[0]["db_now"]
            nexts = occurrences.after_each([(d["cron"], d["timezone"]) for d in due], db_now)
            ok = [(d, n) for d, n in zip(due, nexts) if not isinstance(n, Exception)]
            bad = [(d, n) for d, n in zip(due, nexts) if isinstance(n, Exception)]
            aside = []
            if bad:
                aside = cur.execute(
                    "SELECT worker_name, arm_error, arm_error_since, arm_retry_at"
                    " FROM scrinalia.set_schedules_aside(%b::text[], %b::text[])",
                    (
                        [d["worker_name"] for d, _ in bad],
                        [f"cannot compute the next occurrence here: {one_line(e)}" for _, e in bad],
                    ),
                ).fetchall()
            rows = []
            if ok:
                rows = cur.execute(
                    "SELECT worker_name, decision, run_id, scheduled_for, next_run_at, reason"
                    " FROM scrinalia.tick(%b::text[], %b::timestamptz[], %s)",
                    ([d["worker_name"] for d, _ in ok], [n for _, n in ok], self.name),
                ).fetchall()
        crons = {d["worker_name"]: (d["cron"], d["timezone"]) for d in due}
        with self.log.batch():
            for a in aside:
                self.log(
                    "schedule set aside",
                    level="error",
                    worker=a["worker_name"],
                    reason=a["arm_error"],
                    since=a["arm_error_since"],
                    retry_at=a["arm_retry_at"],
                )
            for r in rows:
                self._log_decision(r, crons[r["worker_name"]], db_now, occurrences)
        return bool(rows or aside), len(due) >= TICK_CHUNK

    def _log_decision(self, r: dict, cron_tz: tuple[str, str], db_now: datetime, occurrences: _Occurrences) -> None:
        nxt = r["next_run_at"].isoformat() if r["next_run_at"] else None
        sched_for = r["scheduled_for"]
        if r["decision"] == "ARMED":
            self.log("armed", worker=r["worker_name"], next_run_at=nxt)
        elif r["decision"] == "ENQUEUED":
            catch_up = occurrences.missed(cron_tz, sched_for, db_now)
            self.log(
                "enqueued",
                worker=r["worker_name"],
                run_id=r["run_id"],
                scheduled_for=sched_for.isoformat(),
                next_run_at=nxt,
                catch_up=catch_up,
            )
            if catch_up:
                self.log(
                    "catch-up",
                    worker=r["worker_name"],
                    run_id=r["run_id"],
                    scheduled_for=sched_for.isoformat(),
                    reason="periods were missed: one run, not a replay",
                )
        else:
            self.log(
                "skipped",
                worker=r["worker_name"],
                scheduled_for=sched_for.isoformat() if sched_for else None,
                next_run_at=nxt,
                reason=r["reason"],
            )

    # --- waiting -----------------------------------------------------------------------

    def _sleep_for(self, progressed: bool) -> float:
        wake_at, wake = self.work_conn.execute(
            "SELECT w, extract(epoch FROM w - now())::float8 FROM scrinalia.next_wakeup() w"
        ).fetchone()
        if wake is None:
            return self.max_sleep
        if wake <= 0 and not progressed:
            return NO_PROGRESS_SLEEP  # due work we could not take (rows locked elsewhere)
        if wake <= self.max_sleep:
            self._prepare(wake_at, time.monotonic() + wake)
            if self._prepared is not None and self._prepared.due_at == wake_at:
                wake -= self._prepared.ahead  # the prepared tick goes out ahead of its instant
        return min(max(wake, MIN_SLEEP), self.max_sleep)

    # --- the prepared tick ---------------------------------------------------------------

    def _prepare(self, due_at: datetime, ready: float) -> None:
        """Reads the schedules due at due_at and computes their next occurrences now,
        while waiting; ahead_of(n) before the instant one pipeline checks the lock and
        calls tick_due_at(), which does the work at once and returns at the instant (on
        the server's clock), and the COMMIT follows: the runs become visible at the
        instant, not after the due query, the cron work and the tick one after another
        on a machine that is busy at every minute boundary."""
        if self._prepared is not None and self._prepared.due_at == due_at:
            return
        self._prepared = None
        rows = self.work_conn.execute(
            "SELECT worker_name, cron, timezone FROM scrinalia.schedules_due_at(%s, %s)", (due_at, PREPARED_LIMIT)
        ).fetchall()
        if not rows:
            return
        # (a spike beyond PREPARED_LIMIT: the rest in the ordinary pass's chunks)
        nexts = cron.try_next_occurrences([(r[1], r[2]) for r in rows], due_at)
        ok = [(r, n) for r, n in zip(rows, nexts) if not isinstance(n, Exception)]
        self._prepared = _Prepared(
            due_at, ready, [r[0] for r, _ in ok], [n for _, n in ok], {r[0]: (r[1], r[2]) for r, _ in ok}
        )

    def _tick_prepared(self) -> None:
        """p.ahead before the prepared instant: check the lock and tick the prepared
        schedules, one transaction sent as one pipeline, committed once tick_due_at()
        returns at the instant. What it does not decide (a schedule changed meanwhile)
        the ordinary pass that follows does."""
        p = self._prepared
        if p is None or time.monotonic() < p.ready - p.ahead:
            return  # woken early (a NOTIFY): kept for its instant
        self._prepared = None
        late = timedelta(seconds=time.monotonic() - p.ready + 1.0)
        if not p.workers or min(p.nexts) <= p.due_at + late:
            return  # a next occurrence may have passed meanwhile: the ordinary pass computes afresh
        conn = self.work_conn
        try:
            with conn.pipeline(), conn.transaction():
                conn.execute("SELECT scrinalia.check_scheduler_lock(%s)", (self.lock_pid,))
                cur = conn.cursor(row_factory=dict_row).execute(
                    "SELECT worker_name, decision, run_id, scheduled_for, next_run_at, reason, now() AS db_now"
                    " FROM scrinalia.tick_due_at(%s, %b::text[], %b::timestamptz[], %s)",
                    (p.due_at, p.workers, p.nexts, self.name),
                )
            rows = cur.fetchall()
        except psycopg.Error as e:
            if e.sqlstate == NOT_LOCK_HOLDER:
                raise LockLost(e.diag.message_primary) from None
            raise
        self.log(
            "prepared tick", level="debug", due_at=p.due_at.isoformat(), schedules=len(p.workers), decided=len(rows)
        )
        occurrences = _Occurrences()
        with self.log.batch():
            for r in rows:
                self._log_decision(r, p.crons[r["worker_name"]], r["db_now"], occurrences)

    def _wait(self, delay: float) -> None:
        """Sleep `delay` seconds, or less when a NOTIFY says there is work; wake-ups
        are coalesced and at most one per min_wake_interval, so a NOTIFY flood from
        any login costs a few passes a second, not one per message."""
        deadline = time.monotonic() + delay
        woken = False
        while not self.stop.is_set():
            now = time.monotonic()
            until = min(deadline, self._last_pass + self.min_wake_interval) if woken else deadline
            if now >= until:
                return
            for _ in self.lock_conn.notifies(timeout=min(until - now, POLL_SLICE), stop_after=1):
                woken = True

    # --- the loop ----------------------------------------------------------------

    def _hold(self) -> None:
        """Pass after pass while we hold the lock; returns when asked to stop."""
        errors = Backoff(base=0.2, cap=max(self.max_sleep, 1.0))
        while not self.stop.is_set():
            try:
                self._tick_prepared()  # before the heartbeat: it checks the lock itself
            except LockLost:
                raise
            except Exception as e:  # noqa: BLE001 - the ordinary pass below decides them anyway
                self._survive(e)
            self._check_lock()
            try:
                progressed = self.tick()
                delay = self._sleep_for(progressed)
                errors.reset()
            except (LockLost, ConfigError):
                raise
            except Exception as e:  # noqa: BLE001
                delay = self._survive(e, errors)
            self._wait(delay)

    def _survive(self, e: Exception, errors: Backoff | None = None) -> float | None:
        """A row or a bug must not stop the daemon: the error is logged (with the
        backoff's next delay, returned, when given). A lost connection is re-raised:
        the caller reconnects."""
        if is_transient(e) or (self.work_conn is not None and self.work_conn.closed):
            raise e
        delay = errors.next_delay() if errors is not None else None
        self.log(
            "pass error",
            level="error",
            sqlstate=getattr(e, "sqlstate", None),
            reason=one_line(e),
            **({} if delay is None else {"retry_in": round(delay, 2)}),
        )
        return delay

    def run(self) -> int:
        reconnect = Backoff(base=0.2, cap=max(self.standby_retry, 0.2))
        while not self.stop.is_set():
            try:
                if not self._acquire():
                    self._stand_by()
                    self.stop.wait(self.standby_retry)
                    continue
                reconnect.reset()
                self._holder_seen = None
                self.log("lock acquired", name=self.name)
                self._hold()
            except LockLost as e:
                self.log("lock lost", level="warning", name=self.name, reason=str(e))
                self._close()
                self.stop.wait(reconnect.next_delay())
            except ConfigError:
                raise
            except Exception as e:  # noqa: BLE001 - transient or not, never a crash loop
                was_holding = self.work_conn is not None
                delay = reconnect.next_delay()
                what = "database unavailable" if is_transient(e) else f"unexpected error {type(e).__name__}"
                self.log(
                    "lock lost" if was_holding else "standby",
                    level="warning",
                    name=self.name,
                    reason=f"{what}: {one_line(e)}",
                    retry_in=round(delay, 2),
                )
                self._close()
                self.stop.wait(delay)
        self.log("stopping", name=self.name)
        if self.lock_conn is not None and self.work_conn is not None:
            try:
                self.lock_conn.execute("SELECT pg_advisory_unlock(scrinalia.scheduler_lock_key())")
            except psycopg.Error:
                pass
        self._close()
        return 0


class _Occurrences:
    """Next occurrences per (cron, zone), kept as windows: the first occurrence after an
    instant is also the first after every later instant before it. So the chunks of a
    pass share them (each chunk's now() is a little later), and so does its log: whether
    an enqueued period hid others is one evaluation per (cron, zone) and missed window,
    not one per run (a 10,000-schedule backlog took 0.45 s of those). An error is not
    kept: it is rare, and the schedule is set aside."""

    def __init__(self) -> None:
        # per (cron, zone): its windows (start, first occurrence after it), by start
        self._windows: dict[tuple[str, str], list[tuple[datetime, datetime]]] = {}

    def _known(self, pair: tuple[str, str], t: datetime) -> datetime | None:
        windows = self._windows.get(pair, ())
        i = bisect.bisect_right(windows, t, key=lambda w: w[0]) - 1
        return windows[i][1] if i >= 0 and t < windows[i][1] else None

    def _keep(self, pair: tuple[str, str], t: datetime, nxt: datetime) -> None:
        bisect.insort_right(self._windows.setdefault(pair, []), (t, nxt), key=lambda w: w[0])

    def after(self, pair: tuple[str, str], t: datetime) -> datetime:
        """cron.next_occurrence(cron, zone, t), raising as it does."""
        nxt = self._known(pair, t)
        if nxt is None:
            nxt = cron.next_occurrence(*pair, t)
            self._keep(pair, t, nxt)
        return nxt

    def after_each(self, pairs: list[tuple[str, str]], t: datetime) -> list:
        """cron.try_next_occurrences(pairs, t): each distinct pair once, an error in its
        pair's place; what an earlier chunk computed is reused."""
        out: dict[tuple[str, str], object] = {}
        todo = []
        for p in set(pairs):
            known = self._known(p, t)
            if known is None:
                todo.append(p)
            else:
                out[p] = known
        for p, n in zip(todo, cron.try_next_occurrences(todo, t)):
            out[p] = n
            if not isinstance(n, Exception):
                self._keep(p, t, n)
        return [out[p] for p in pairs]

    def missed(self, pair: tuple[str, str], sched_for: datetime, db_now: datetime) -> bool:
        """Whether an occurrence falls in (sched_for, db_now]: the run is a catch-up."""
        # periods fall on minutes: only a period due over a minute ago can hide another
        return db_now - sched_for >= timedelta(minutes=1) and self.after(pair, sched_for) <= db_now


def build_parser() -> argparse.ArgumentParser:
    p = argtypes.DaemonParser(prog="scrinalia-scheduler", description="the one-instance cron scheduler")
    p.add_argument("--dsn", help="database (else DATABASE_URL or the PG* variables)")
    p.add_argument(
        "--standby-retry",
        type=argtypes.seconds(0.05, 3600),
        default=3.0,
        metavar="SECONDS",
        help="seconds between two lock attempts of a standby (default 3)",
    )
    p.add_argument(
        "--max-sleep",
        type=argtypes.seconds(0.05, 3600),
        default=5.0,
        metavar="SECONDS",
        help="the longest sleep between passes (default 5)",
    )
    p.add_argument(
        "--min-wake-interval",
        type=argtypes.seconds(0.0, 10),
        default=0.2,
        metavar="SECONDS",
        help="NOTIFY wake-ups closer than this to the last pass are coalesced (default 0.2)",
    )
    p.add_argument("--name", type=_name, help="recorded as the ticker (default host:pid)")
    p.add_argument("--json", action="store_true", help="JSON log lines")
    p.add_argument(
        "--log-level",
        default="info",
        type=str.lower,
        choices=["debug", "info", "warning", "error"],
        help="case-insensitive: debug, info, warning, error",
    )
    return p


def _name(text: str) -> str:
    if not 1 <= len(text) <= 200 or not text.isprintable():
        raise argparse.ArgumentTypeError("a name is 1 to 200 printable characters")
    return text


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    log = EventLog(json_lines=args.json, level=args.log_level)
    try:
        dsn = preflight(
            args.dsn,
            "scrinalia-scheduler check",
            functions=REQUIRED_FUNCTIONS,
            job="run the scheduler",
            groups=GROUPS,
            server_keepalives=True,
        )
    except ConfigError as e:
        startup_error(log, "scrinalia-scheduler", args.json, e)
        return EXIT_CONFIG
    sched = Scheduler(
        dsn,
        name=args.name,
        standby_retry=args.standby_retry,
        max_sleep=args.max_sleep,
        min_wake_interval=args.min_wake_interval,
        log=log,
    )

    def _stop(signum, frame):
        if sched.stop.is_set():  # a second signal: leave at once
            os._exit(128 + signum)
        sched.stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        return sched.run()
    except ConfigError as e:
        startup_error(log, "scrinalia-scheduler", args.json, e)
        return EXIT_CONFIG
