"""The real scheduler against careless clients: an operator's enqueue left open, and
the scheduler-state row held by an open transaction, cost no other worker its period;
the held worker is decided once it is free; health names the holder meanwhile."""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest

from helpers import make_worker, put_schedule
from scrinalia_workers.testkit.waiting import wait_for

pytestmark = pytest.mark.slow

SECOND = timedelta(seconds=1)


def _due_now(db, *workers):
    db.execute(
        "UPDATE scrinalia.archive_worker_schedules SET next_run_at = now() WHERE worker_name = ANY(%s)",
        (list(workers),),
    )
    db.execute("NOTIFY scrinalia_scheduler")


def _scheduled_run(db, worker):
    return db.execute(
        "SELECT run_id, created_at - scheduled_for FROM scrinalia.archive_worker_runs"
        " WHERE worker_name = %s AND trigger = 'SCHEDULE'",
        (worker,),
    ).fetchone()


def _reason(db):
    return db.execute("SELECT reason FROM scrinalia.scheduler_health()").fetchone()[0] or ""


def _armed(db, db_dsn, procs, *workers):
    for w in workers:
        make_worker(db, w)
        put_schedule(db, w, "0 3 * * *", "UTC")
    p = procs.scheduler(db_dsn, "--max-sleep", "1")
    for w in workers:
        p.wait_event("armed", worker=w, timeout=20)
    return p


def test_an_open_enqueue_holds_back_only_its_worker(db, db_dsn, connect_as, role_logins, procs):
    p = _armed(db, db_dsn, procs, "u1", "u2")
    careless = connect_as("operator")
    careless.autocommit = False
    manual = careless.execute("SELECT run_id FROM scrinalia.enqueue('u1')").fetchone()[0]  # left open
    _due_now(db, "u1", "u2")

    wait_for(lambda: _scheduled_run(db, "u2"), timeout=10, what="u2 enqueued beside the open enqueue of u1")
    assert _scheduled_run(db, "u2")[1] <= SECOND  # its period, not ten seconds late
    assert _scheduled_run(db, "u1") is None

    pid = careless.info.backend_pid
    wait_for(lambda: f"pid {pid}" in _reason(db), timeout=15, what="health names the open transaction")
    reason = _reason(db)
    assert role_logins["operator"] in reason and "idle in transaction" in reason and "the schedule of u1" in reason

    careless.commit()
    freed = db.execute("SELECT now()").fetchone()[0]
    wait_for(
        lambda: db.execute(
            "SELECT last_skipped_at FROM scrinalia.archive_worker_schedules WHERE worker_name = 'u1'"
        ).fetchone()[0],
        timeout=10,
        what="u1's held period decided once the enqueue committed",
    )
    skipped_at, why = db.execute(
        "SELECT last_skipped_at, last_skip_reason FROM scrinalia.archive_worker_schedules WHERE worker_name = 'u1'"
    ).fetchone()
    assert skipped_at - freed <= SECOND and why == f"run #{manual} is active"
    assert _scheduled_run(db, "u1") is None  # one run for the slot: the manual one
    wait_for(lambda: f"pid {pid}" not in _reason(db), timeout=5, what="health forgets the ended transaction")
    assert p.running()


def test_a_held_scheduler_state_row_stops_no_period(db, db_dsn, procs):
    p = _armed(db, db_dsn, procs, "u3")
    with psycopg.connect(db_dsn) as other:  # the owner's transaction, left open
        other.execute("UPDATE scrinalia.scheduler_state SET ticks = ticks")
        _due_now(db, "u3")
        wait_for(lambda: _scheduled_run(db, "u3"), timeout=10, what="u3 enqueued while scheduler_state is held")
        assert _scheduled_run(db, "u3")[1] <= SECOND
        pid = other.info.backend_pid
        wait_for(lambda: f"pid {pid}" in _reason(db), timeout=15, what="health names the holder of scheduler_state")
        assert "the scheduler-state row" in _reason(db)
        other.rollback()
    assert p.running() and not p.has("lock lost")
