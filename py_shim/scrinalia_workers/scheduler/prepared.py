"""The prepared tick: the schedules due at the next instant, ticked at that instant.

While the holder waits for the next due instant it reads the schedules due then and
computes their next occurrences; ahead_of(n) before the instant one pipeline checks the
lock and calls tick_due_at(), which does the work at once and returns at the instant
(on the server's clock), and the COMMIT sent with them follows at once, in the server
(a holder frozen meanwhile does not hold the period back): the runs become visible at the
instant, not after the due query, the cron work and the tick one after another on a
machine that is busy at every minute boundary. What it does not decide (a schedule
changed meanwhile, a spike beyond the prepared limit) the ordinary pass after it does.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import NamedTuple

import psycopg
from psycopg.rows import dict_row

from scrinalia_workers import cron
from scrinalia_workers.errors import NOT_LOCK_HOLDER, LockLost
from scrinalia_workers.gateway.statements import scheduler as sql
from scrinalia_workers.logs import EventLog
from scrinalia_workers.scheduler.decision_lines import log_decision
from scrinalia_workers.scheduler.settings import DEFAULTS

# How long before a due instant the prepared tick is sent (scrinalia.tick_due_at, at
# most scrinalia.max_tick_ahead()): enough for its work on a busy machine, so that
# only the COMMIT is left for the instant; the slots are taken this much early.
# TICK_AHEAD, plus AHEAD_PER_SCHEDULE for each schedule it ticks (twice what that work
# takes on a small machine), for at most SchedulerSettings.prepared_limit schedules,
# inside max_tick_ahead(): a spike of that many is visible whole at its instant, and
# what is beyond the limit goes to the ordinary pass after it.
TICK_AHEAD = 0.25
AHEAD_PER_SCHEDULE = 40e-6


def ahead_of(schedules: int) -> float:
    """The lead of a prepared tick of that many schedules (counted up to the default
    limit, which the lead's bound, max_tick_ahead(), was chosen for)."""
    return TICK_AHEAD + AHEAD_PER_SCHEDULE * min(schedules, DEFAULTS.prepared_limit)


class Prepared(NamedTuple):
    """The tick of the schedules due at `due_at`, computed while waiting for it."""

    due_at: datetime
    ready: float  # the daemon's clock at due_at, as this process sees it
    workers: list[str]
    nexts: list[datetime]
    crons: dict[str, tuple[str, str]]

    @property
    def ahead(self) -> float:
        """How long before `ready` the tick is sent."""
        return ahead_of(len(self.workers))

    def is_due(self, now: float) -> bool:
        """Whether, at `now` on the daemon's clock, it is time to send it (a NOTIFY may
        wake the holder earlier: the prepared tick is then kept for its instant)."""
        return now >= self.ready - self.ahead

    def still_valid(self, now: float) -> bool:
        """False when a next occurrence may have passed by the time it is sent (late,
        or a minutely cron prepared at second 59): the ordinary pass computes afresh."""
        late = timedelta(seconds=now - self.ready + 1.0)
        return bool(self.workers) and min(self.nexts) > self.due_at + late


def prepare(conn: psycopg.Connection, due_at: datetime, ready: float, limit: int) -> Prepared | None:
    """Reads the schedules due at due_at (at most `limit`) and computes their
    next occurrences; None when none is due then. One whose occurrence cannot be
    computed is left out: the ordinary pass sets it aside."""
    rows = conn.cursor(row_factory=dict_row).execute(sql.SCHEDULES_DUE_AT, (due_at, limit)).fetchall()
    if not rows:
        return None
    nexts = cron.try_next_occurrences([(r["cron"], r["timezone"]) for r in rows], due_at)
    ok = [(r, n) for r, n in zip(rows, nexts) if not isinstance(n, Exception)]
    return Prepared(
        due_at,
        ready,
        [r["worker_name"] for r, _ in ok],
        [n for _, n in ok if not isinstance(n, Exception)],
        {r["worker_name"]: (r["cron"], r["timezone"]) for r, _ in ok},
    )


def send(conn: psycopg.Connection, p: Prepared, *, lock_pid: int | None, name: str, log: EventLog) -> None:
    """Checks the lock and ticks the prepared schedules: one transaction, its COMMIT sent
    in the same pipeline, so the server commits it when tick_due_at() returns at the
    instant whatever this process does meanwhile. (A COMMIT sent once the answer came,
    as conn.transaction() does in a pipeline, left a holder frozen during the wait with
    its period invisible and its rows held for as long as it stayed frozen.)"""
    try:
        with conn.pipeline():
            # in a pipeline an error surfaces at the sync, so the refusal is caught around it;
            # after an error the server skips the rest, the COMMIT too
            conn.execute(sql.BEGIN)
            conn.execute(sql.CHECK_LOCK, (lock_pid,))
            cur = conn.cursor(row_factory=dict_row).execute(sql.TICK_DUE_AT, (p.due_at, p.workers, p.nexts, name))
            conn.execute(sql.COMMIT)
        rows = cur.fetchall()
    except psycopg.Error as e:
        _roll_back(conn)
        if e.sqlstate == NOT_LOCK_HOLDER:
            raise LockLost(e.diag.message_primary) from None
        raise
    log("prepared tick", level="debug", due_at=p.due_at.isoformat(), schedules=len(p.workers), decided=len(rows))
    with log.batch():
        for r in rows:
            log_decision(log, r, p.crons[r["worker_name"]])


def _roll_back(conn: psycopg.Connection) -> None:
    """Out of the transaction an error left open (aborted); a broken session has none."""
    if conn.closed or conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
        return
    try:
        conn.rollback()
    except psycopg.Error:
        pass  # the session broke: the loop finds it
