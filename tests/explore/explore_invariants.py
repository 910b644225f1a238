"""What must hold after every step of every interleaving, read from the ledger by a
superuser session, and the abstract state the explorer hashes.

Each check returns a list of violations (empty: it holds), worded for a report."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

import psycopg

# ADR 0015 (the words): the retry after attempt n waits 60 s x 2^(n-1), +-20 %,
# capped at 30 min, counted from its creation (create_retries: the same now()).
BASE_DELAY, CAP, JITTER = 60.0, 1800.0, 0.2


def retry_window(attempt: int) -> tuple[float, float]:
    d = min(BASE_DELAY * 2 ** (attempt - 1), CAP)
    return min(d * (1 - JITTER), CAP), min(d * (1 + JITTER), CAP)


# one run per (worker, period, attempt); at most one active run per worker; every
# retry's not_before inside its window (the window's bounds passed per parent attempt)
LEDGER = """
SELECT format('period %%s @ %%s attempt %%s has %%s runs %%s', worker_name, scheduled_for, attempt, count(*),
              array_agg(run_id ORDER BY run_id))
  FROM scrinalia.archive_worker_runs WHERE trigger = 'SCHEDULE'
 GROUP BY worker_name, scheduled_for, attempt HAVING count(*) > 1
UNION ALL
SELECT format('worker %%s has %%s active runs %%s', worker_name, count(*), array_agg(run_id ORDER BY run_id))
  FROM scrinalia.archive_worker_runs WHERE status IN ('QUEUED', 'RUNNING')
 GROUP BY worker_name HAVING count(*) > 1
UNION ALL
SELECT format('retry #%%s of #%%s (attempt %%s) waits %%s s, outside [%%s, %%s]', r.run_id, p.run_id, p.attempt,
              round(extract(epoch FROM r.not_before - r.created_at), 3), w.lo, w.hi)
  FROM scrinalia.archive_worker_runs r
  JOIN scrinalia.archive_worker_runs p ON p.run_id = r.retry_of
  JOIN unnest(%(attempts)s::int[], %(lo)s::float8[], %(hi)s::float8[]) AS w(attempt, lo, hi) ON w.attempt = p.attempt
 WHERE r.not_before IS NULL
    OR extract(epoch FROM r.not_before - r.created_at) NOT BETWEEN w.lo - 0.001 AND w.hi + 0.001
"""
_ATTEMPTS = [1, 2, 3, 4]
_WINDOWS = {
    "attempts": _ATTEMPTS,
    "lo": [retry_window(a)[0] for a in _ATTEMPTS],
    "hi": [retry_window(a)[1] for a in _ATTEMPTS],
}


def ledger(admin: psycopg.Connection) -> list[str]:
    return [r[0] for r in admin.execute(LEDGER, _WINDOWS).fetchall()]


# who holds the lock, and whom its heartbeat vouches for
HOLDER = (
    "SELECT scrinalia.scheduler_lock_holder(), st.heartbeat_pid, st.heartbeat_work_pid"
    " FROM scrinalia.scheduler_state st"
)


def decided_as_holder(admin: psycopg.Connection, who: str, lock_pid: int | None, work_pid: int | None) -> list[str]:
    """A scheduler's deciding statement succeeded: its lock session must hold the lock,
    and a heartbeat of that holder must vouch for the work session that decided (a
    holder that never heartbeats is 0.1.0's scheduler, its work session its own:
    is_scheduler_session)."""
    holder, hb_pid, hb_work = admin.execute(HOLDER).fetchone()
    if holder is not None and holder == lock_pid and (hb_pid != lock_pid or hb_work == work_pid):
        return []
    return [
        f"{who} decided from work session pid {work_pid} while the lock is held by pid {holder}"
        f" (its lock session: pid {lock_pid}; the heartbeat vouches for pid {hb_work} of pid {hb_pid})"
    ]


# a run's whole row, and whether the lease of this token still holds (what finish_runs
# and heartbeat_runs accept)
RUN = """
SELECT r.run_id, r::text,
       r.status = 'RUNNING' AND r.lease_token = i.token
       AND greatest(r.lease_expires_at, scrinalia.lease_held_until(r.lease_expires_at, r.lease_duration,
                                                                   coalesce(r.heartbeat_at, r.started_at))) > now()
  FROM unnest(%s::bigint[], %s::uuid[]) AS i(run_id, token)
  JOIN scrinalia.archive_worker_runs r ON r.run_id = i.run_id
"""


def leases(admin: psycopg.Connection, held: list[tuple[int, Any]]) -> dict[int, tuple[str, bool]]:
    """Per held run: its row, and whether this token's lease holds."""
    if not held:
        return {}
    rows = admin.execute(RUN, ([r for r, _ in held], [t for _, t in held])).fetchall()
    return {r[0]: (r[1], r[2]) for r in rows}


def fenced_wrote(
    who: str, step: str, before: dict[int, tuple[str, bool]], after: dict[int, tuple[str, bool]]
) -> list[str]:
    """A call with a lost lease must change nothing of that run."""
    return [
        f"{who} {step} with a lost lease changed run #{rid}: {row} -> {after[rid][0]}"
        for rid, (row, live) in before.items()
        if not live and rid in after and after[rid][0] != row
    ]


def lost_periods(
    admin: psycopg.Connection, periods: Iterable[tuple[str, datetime]], accounted: set[tuple[str, datetime]]
) -> list[str]:
    """Once the actors settle: every period that came due has a run, a logged decision
    (`accounted`: a tick's committed decision or an operator's change of the
    schedule), or is still the schedule's due instant (the next tick's)."""
    out = []
    for worker, p in periods:
        if (worker, p) in accounted:
            continue
        ran, pending = admin.execute(
            "SELECT EXISTS (SELECT FROM scrinalia.archive_worker_runs WHERE worker_name = %(w)s"
            "               AND trigger = 'SCHEDULE' AND attempt = 1 AND scheduled_for = %(p)s),"
            "       EXISTS (SELECT FROM scrinalia.archive_worker_schedules WHERE worker_name = %(w)s"
            "               AND next_run_at = %(p)s)",
            {"w": worker, "p": p},
        ).fetchone()
        if not (ran or pending):
            out.append(f"period {worker} @ {p.isoformat()} has neither a run nor a logged reason")
    return out


# the abstract state: what decides what the next steps do, without the instants
# themselves (only which side of now() they are on) and with pids named by the caller
STATE = """
SELECT (SELECT coalesce(string_agg(format('%s/%s/%s/%s/%s/%s/%s/%s/%s/%s', run_id, worker_name, trigger,
                                         attempt, status, retry_of, retry_pending, lease_owner,
                                         CASE WHEN not_before > now() THEN 'held' END,
                                         CASE WHEN lease_expires_at > now() THEN 'live'
                                              WHEN lease_expires_at IS NOT NULL THEN 'out' END), ';'
                                  ORDER BY run_id), '')
          FROM scrinalia.archive_worker_runs),
       (SELECT coalesce(string_agg(format('%s/%s/%s/%s/%s', worker_name, enabled, cron,
                                         CASE WHEN next_run_at IS NULL THEN 'unarmed'
                                              WHEN next_run_at <= now() THEN 'due' ELSE 'armed' END,
                                         arm_error IS NOT NULL), ';' ORDER BY worker_name), '')
          FROM scrinalia.archive_worker_schedules),
       scrinalia.scheduler_lock_holder(), st.heartbeat_pid, st.heartbeat_work_pid,
       st.heartbeat_at < now() - scrinalia.scheduler_stale_after()
  FROM scrinalia.scheduler_state st
"""


def state(admin: psycopg.Connection, name_of: dict[int, str]) -> tuple:
    runs, schedules, holder, hb, hb_work, stale = admin.execute(STATE).fetchone()

    def named(pid: int | None) -> str | None:
        return None if pid is None else name_of.get(pid, "gone")

    return runs, schedules, named(holder), named(hb), named(hb_work), stale
