"""The ledger's invariants, checked against the database after (and during) a scenario.

Every check returns a list of human-readable violations (empty: the invariant
holds), so that a scenario can assert on all of them at once and print what broke.
`check_all()` runs the ones that need nothing but the ledger; `lost_periods()`
needs what the scenario knows (the window the scheduler was up, the skips it saw).

The checks read the tables directly: connect as the owner (the test superuser).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

import psycopg

from scrinalia_workers import cron

# ADR 0015: the delay after attempt n is min(60 * 2^(n-1), 1800) s, jittered by
# +-20 % and capped again at 1800 s.
BASE_DELAY = 60.0
CAP = 1800.0
JITTER = 0.2
MAX_ATTEMPTS = 3


def retry_window(attempt: int) -> tuple[float, float]:
    """The (low, high) seconds the retry after `attempt` may wait."""
    d = min(BASE_DELAY * 2 ** (attempt - 1), CAP)
    return min(d * (1 - JITTER), CAP), min(d * (1 + JITTER), CAP)


def _rows(conn: psycopg.Connection, sql: str, params=()) -> list[tuple]:
    return conn.execute(sql, params).fetchall()


def double_periods(conn: psycopg.Connection) -> list[str]:
    """No period enqueued twice: one attempt-1 SCHEDULE row per (worker, scheduled_for)."""
    return [
        f"period {w} @ {sf} enqueued {n} times (runs {ids})"
        for w, sf, n, ids in _rows(
            conn,
            """
            SELECT worker_name, scheduled_for, count(*), array_agg(run_id ORDER BY run_id)
              FROM scrinalia.archive_worker_runs
             WHERE trigger = 'SCHEDULE' AND attempt = 1
             GROUP BY 1, 2 HAVING count(*) > 1""",
        )
    ]


def busy_slots(conn: psycopg.Connection) -> list[str]:
    """Never two QUEUED/RUNNING rows for a worker (sample it during a run too)."""
    return [
        f"worker {w} has {n} live runs {ids}"
        for w, n, ids in _rows(
            conn,
            """
            SELECT worker_name, count(*), array_agg(run_id ORDER BY run_id)
              FROM scrinalia.archive_worker_runs
             WHERE status IN ('QUEUED', 'RUNNING')
             GROUP BY 1 HAVING count(*) > 1""",
        )
    ]


def retry_shape(conn: psycopg.Connection) -> list[str]:
    """Every retry row is the right child of the right parent.

    A retry is SCHEDULE, attempt = parent + 1 (<= 3), of a SCHEDULE parent that ended
    FAILED or INTERRUPTED, with the parent's request and scheduled_for, and a
    not_before inside the jittered backoff window counted from its creation (both
    are the same transaction's now()). A parent carries at most one retry; a MANUAL
    or CLI run none; a parent whose retry exists no longer owes one.
    """
    out = []
    for rid, att, trig, nb, created, req, sf, pid, patt, ptrig, pstatus, preq, psf, ppending in _rows(
        conn,
        """
            SELECT r.run_id, r.attempt, r.trigger, r.not_before, r.created_at, r.request, r.scheduled_for,
                   p.run_id, p.attempt, p.trigger, p.status, p.request, p.scheduled_for, p.retry_pending
              FROM scrinalia.archive_worker_runs r
              LEFT JOIN scrinalia.archive_worker_runs p ON p.run_id = r.retry_of
             WHERE r.retry_of IS NOT NULL OR r.attempt > 1""",
    ):
        where = f"retry #{rid} (attempt {att}) of #{pid}"
        if pid is None:
            out.append(f"{where}: attempt {att} without a parent")
            continue
        if trig != "SCHEDULE" or ptrig != "SCHEDULE":
            out.append(f"{where}: trigger {trig}, parent trigger {ptrig} (only SCHEDULE is retried)")
        if att != patt + 1 or att > MAX_ATTEMPTS:
            out.append(f"{where}: parent is attempt {patt}")
        if pstatus not in ("FAILED", "INTERRUPTED"):
            out.append(f"{where}: parent ended {pstatus}")
        if req != preq or sf != psf:
            out.append(f"{where}: request/scheduled_for differ from the parent's")
        if ppending:
            out.append(f"{where}: parent still marked retry_pending")
        if nb is None:
            out.append(f"{where}: no not_before")
        else:
            lo, hi = retry_window(patt)
            wait = (nb - created).total_seconds()
            if not (lo - 0.001 <= wait <= hi + 0.001):
                out.append(f"{where}: waits {wait:.3f}s, outside [{lo:.1f}, {hi:.1f}]")
    out += [
        f"run #{rid} ({trig}) attempt {att} status {st}: a MANUAL/CLI run must never be retried"
        for rid, trig, att, st in _rows(
            conn,
            """
            SELECT run_id, trigger, attempt, status FROM scrinalia.archive_worker_runs
             WHERE trigger <> 'SCHEDULE' AND (attempt <> 1 OR retry_pending
                   OR run_id IN (SELECT retry_of FROM scrinalia.archive_worker_runs WHERE retry_of IS NOT NULL))""",
        )
    ]
    out += [
        f"run #{rid} attempt 3 has a retry or owes one"
        for (rid,) in _rows(
            conn,
            """
            SELECT p.run_id FROM scrinalia.archive_worker_runs p
             WHERE p.attempt >= 3 AND (p.retry_pending
                   OR EXISTS (SELECT 1 FROM scrinalia.archive_worker_runs c WHERE c.retry_of = p.run_id))""",
        )
    ]
    out += [
        f"run #{rid} has {n} retries"
        for rid, n in _rows(
            conn,
            """
            SELECT retry_of, count(*) FROM scrinalia.archive_worker_runs
             WHERE retry_of IS NOT NULL GROUP BY 1 HAVING count(*) > 1""",
        )
    ]
    return out


def owed_retries(conn: psycopg.Connection, settled_at: datetime | None = None) -> list[str]:
    """Every FAILED/INTERRUPTED SCHEDULE attempt 1 or 2 has its retry once a retry
    pass ran after it ended.

    settled_at: when the last create_retries() pass ran (default: the scheduler's
    last tick). A failure whose slot a MANUAL/CLI run held at that moment may
    legitimately still be owed (create_retries leaves it pending for a later tick).
    """
    if settled_at is None:
        settled_at = conn.execute("SELECT last_tick_at FROM scrinalia.scheduler_state").fetchone()[0]
    if settled_at is None:
        return []
    return [
        f"run #{rid} ({w}, attempt {att}, {st} at {fin}) has no retry although a retry pass ran at {settled_at}"
        for rid, w, att, st, fin in _rows(
            conn,
            """
            SELECT p.run_id, p.worker_name, p.attempt, p.status, p.finished_at
              FROM scrinalia.archive_worker_runs p
             WHERE p.trigger = 'SCHEDULE' AND p.attempt < 3
               AND p.status IN ('FAILED', 'INTERRUPTED') AND p.finished_at < %(t)s
               AND NOT EXISTS (SELECT 1 FROM scrinalia.archive_worker_runs c WHERE c.retry_of = p.run_id)
               AND NOT EXISTS (SELECT 1 FROM scrinalia.archive_worker_runs m
                                WHERE m.worker_name = p.worker_name AND m.trigger <> 'SCHEDULE'
                                  AND m.created_at <= %(t)s
                                  AND (m.finished_at IS NULL OR m.finished_at >= %(t)s))""",
            {"t": settled_at},
        )
    ]


def check_all(conn: psycopg.Connection, settled_at: datetime | None = None) -> list[str]:
    """All the ledger-only invariants."""
    return double_periods(conn) + busy_slots(conn) + retry_shape(conn) + owed_retries(conn, settled_at)


@dataclass
class Decision:
    """One tick decision as the scheduler logged it (or tick() returned it)."""

    worker: str
    decision: str  # ENQUEUED | SKIPPED | ARMED
    scheduled_for: datetime | None
    at: datetime  # the tick's now()


def lost_periods(
    conn: psycopg.Connection,
    worker: str,
    expr: str,
    tz: str,
    window: tuple[datetime, datetime],
    decisions: Iterable[Decision] = (),
    grace: timedelta = timedelta(seconds=5),
) -> list[str]:
    """Every period of `worker` whose instant passed inside `window` (the scheduler
    up the whole time) has a run or a recorded skip, unless the one-catch-up rule
    absorbed it.

    A period p is accounted for when an attempt-1 SCHEDULE run has scheduled_for = p,
    or a SKIPPED decision names p. It is absorbed when a decision for an earlier
    period q < p was taken at t >= p: that tick advanced past p (several missed
    periods, one run). Periods in the last `grace` of the window may still be being
    ticked and are not counted.
    """
    start, end = window
    ran = {
        r[0]
        for r in _rows(
            conn,
            """
        SELECT scheduled_for FROM scrinalia.archive_worker_runs
         WHERE worker_name = %s AND trigger = 'SCHEDULE' AND attempt = 1""",
            (worker,),
        )
    }
    ds = [d for d in decisions if d.worker == worker and d.decision in ("ENQUEUED", "SKIPPED")]
    skipped = {d.scheduled_for for d in ds if d.decision == "SKIPPED"}
    out = []
    t = start
    while True:
        p = cron.next_occurrence(expr, tz, t)
        if p > end - grace:
            break
        t = p
        if p in ran or p in skipped:
            continue
        if any(d.scheduled_for is not None and d.scheduled_for < p <= d.at for d in ds):
            continue
        out.append(f"period {worker} @ {p.isoformat()} has neither a run nor a skip")
    return out


def settled_after(conn, last) -> bool:
    """Every period armed up to `last` has passed and been ticked, and the runners have
    drained what was claimable: a scenario's daemons are done with its periods."""
    now = conn.execute("SELECT now()").fetchone()[0]
    pending = conn.execute(
        "SELECT (SELECT count(*) FROM scrinalia.archive_worker_schedules WHERE next_run_at <= %s)"
        " + (SELECT count(*) FROM scrinalia.archive_worker_runs WHERE status IN ('QUEUED', 'RUNNING')"
        "    AND (not_before IS NULL OR not_before <= now()))",
        (last,),
    ).fetchone()[0]
    return now > last + timedelta(seconds=1) and pending == 0
