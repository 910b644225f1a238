"""The scheduler daemon: exactly one instance ticks, decided by an advisory lock.

    python -m scrinalia_workers.scheduler [--dsn DSN] [--json] ...

A dedicated *lock session* holds the advisory lock scrinalia.scheduler_lock_key() for
the process lifetime and LISTENs for work; another instance stays in standby, its lock
session in the lock's queue, and looks at the holder every --standby-retry seconds (scheduler.leadership: the states, and what
moves the process from one to another; scheduler.sessions: the two sessions).

While it holds the lock, pass after pass on a separate *work session*: the prepared
tick when its instant comes (scheduler.prepared), the heartbeat, one pass
(scheduler.tick), then a wait until the next due instant or a NOTIFY
(scheduler.pacing). NOTIFY wake-ups are coalesced and rate-limited
(--min-wake-interval): any login can send one.
"""

from __future__ import annotations

import os
import socket
import threading
from datetime import datetime

import psycopg
from psycopg.rows import dict_row

from scrinalia_workers.clock import SYSTEM, Clock
from scrinalia_workers.errors import NOT_THE_SCHEDULER, ConfigError, LockLost
from scrinalia_workers.gateway.backoff import Backoff, is_transient
from scrinalia_workers.gateway.statements import scheduler as sql
from scrinalia_workers.logs import EventLog, one_line
from scrinalia_workers.scheduler import pacing, prepared
from scrinalia_workers.scheduler.leadership import Leadership
from scrinalia_workers.scheduler.sessions import Sessions, one_row
from scrinalia_workers.scheduler.settings import DEFAULTS, SchedulerSettings
from scrinalia_workers.scheduler.tick import Pass, Repair

__all__ = ["Scheduler", "SchedulerSettings"]


class Scheduler:
    def __init__(
        self,
        dsn: str,
        *,
        name: str | None = None,
        settings: SchedulerSettings = DEFAULTS,
        log: EventLog | None = None,
        clock: Clock = SYSTEM,
    ):
        self.dsn = dsn
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        self.settings = settings
        standby_retry, max_sleep = settings.standby_retry, settings.max_sleep
        self.log = log or EventLog()
        self.clock = clock
        self.stop = threading.Event()
        self.sessions = Sessions(dsn, self.name, idle_margin=max(max_sleep, standby_retry))
        self.leadership = Leadership(
            self.sessions, name=self.name, log=self.log, stop=self.stop, standby_retry=standby_retry, clock=clock
        )
        self.passes = 0
        self._last_pass = 0.0
        self._prepared: prepared.Prepared | None = None
        self._next_repair: float | None = None  # the clock's instant of the next look (None: the first pass)

    # --- the sessions and the lock (scheduler.leadership) --------------------------------

    @property
    def lock_conn(self) -> psycopg.Connection | None:
        return self.sessions.lock_conn

    @property
    def work_conn(self) -> psycopg.Connection | None:
        return self.sessions.work_conn

    @property
    def lock_pid(self) -> int | None:
        return self.sessions.lock_pid

    def _acquire(self, wait: float = 5.0) -> bool:
        """One attempt at the lock, waiting at most `wait` seconds; True when held (and
        the work session is ready)."""
        return self.leadership.attempt(wait)

    def _check_lock(self) -> None:
        self.leadership.check()

    def _close(self) -> None:
        self.sessions.close()

    # --- one pass (scheduler.tick) -------------------------------------------------------

    def tick(self) -> bool:
        """One pass: reap, retries, then the due schedules. True when it decided anything."""
        self.passes += 1
        self._last_pass = self.clock.monotonic()
        self.log("pass", level="debug", n=self.passes)
        now = self.clock.monotonic()
        repair: Repair | None = None
        if self._next_repair is None or now >= self._next_repair:
            repair = Repair.BEFORE if self._next_repair is None else Repair.AFTER
            self._next_repair = now + self.settings.repair_every
        return Pass(
            self.sessions.work,
            name=self.name,
            lock_pid=self.lock_pid,
            log=self.log,
            check_lock=self._check_lock,
            repair=repair,
            settings=self.settings,
            computing=self.sessions.computing,
        ).run()

    # --- waiting (scheduler.pacing) and the prepared tick (scheduler.prepared) -----------

    def _sleep_for(self, progressed: bool) -> float:
        """How long to wait after a pass; prepares the next instant's tick when it is near."""
        row = one_row(self.sessions.work.cursor(row_factory=dict_row).execute(sql.NEXT_WAKEUP))
        wake_at, wake_in = row["wake_at"], row["wake_in"]
        lead = 0.0
        if pacing.prepares(wake_in, progressed, self.settings.max_sleep):
            self._prepare(wake_at, self.clock.monotonic() + wake_in)
            if self._prepared is not None and self._prepared.due_at == wake_at:
                lead = self._prepared.ahead  # the prepared tick goes out ahead of its instant
        return pacing.delay_after_pass(wake_in, progressed, self.settings.max_sleep, lead)

    def _prepare(self, due_at: datetime, ready: float) -> None:
        if self._prepared is not None and self._prepared.due_at == due_at:
            return
        self._prepared = None  # stays None if the read fails
        self._prepared = prepared.prepare(self.sessions.work, due_at, ready, self.settings.prepared_limit)

    def _tick_prepared(self) -> None:
        """The prepared tick, when its time has come; a wake-up before that keeps it."""
        p = self._prepared
        if p is None or not p.is_due(self.clock.monotonic()):
            return
        self._prepared = None
        if p.still_valid(self.clock.monotonic()):
            prepared.send(self.sessions.work, p, lock_pid=self.lock_pid, name=self.name, log=self.log)

    def _wait(self, delay: float) -> None:
        pacing.wait(
            delay,
            clock=self.clock,
            stop=self.stop,
            last_pass=self._last_pass,
            min_wake_interval=self.settings.min_wake_interval,
            notified=self.sessions.notified,
        )

    # --- the loop ----------------------------------------------------------------

    def _hold(self) -> None:
        """Pass after pass while we hold the lock; returns when asked to stop."""
        errors = Backoff(base=0.2, cap=max(self.settings.max_sleep, 1.0))
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

    def _survive(self, e: Exception, errors: Backoff | None = None) -> float:
        """A row or a bug must not stop the daemon: the error is logged (with the
        backoff's next delay, returned, when given). A lost connection is re-raised:
        the caller reconnects; a refusal as not the scheduler is a lost lock."""
        if is_transient(e) or (self.work_conn is not None and self.work_conn.closed):
            raise e
        if getattr(e, "sqlstate", None) == NOT_THE_SCHEDULER:  # our work session is vouched for no more
            raise LockLost(one_line(e)) from e
        delay = errors.next_delay() if errors is not None else None
        self.log(
            "pass error",
            level="error",
            sqlstate=getattr(e, "sqlstate", None),
            reason=one_line(e),
            **({} if delay is None else {"retry_in": round(delay, 2)}),
        )
        return 0.0 if delay is None else delay

    def run(self) -> int:
        """Until asked to stop (self.stop): the lock session's states, passes while holding."""
        self.leadership.run(self._hold)
        return 0
