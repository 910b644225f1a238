"""A careless client cannot stall the others: an uncommitted enqueue, or a
transaction holding a schedule's, a worker's or the scheduler-state row, costs no
other worker its period, the held one is decided once it is free, and
scheduler_health() names the session that holds it."""

from __future__ import annotations

import psycopg
import pytest

from helpers import make_worker, next_occurrence, put_schedule, set_next_run, tick
from scrinalia_workers.testkit.waiting import wait_for


def due(db, *workers):
    for w in workers:
        make_worker(db, w)
        put_schedule(db, w, "0 2 * * *")
    tick(db, only=list(workers))  # armed
    for w in workers:
        set_next_run(db, w, "1 minute")


@pytest.fixture
def impatient(db):
    """The test's scheduler connection: any wait on a row lock fails at once."""
    db.execute("SET lock_timeout = '500ms'")
    return db


@pytest.fixture
def careless(connect_as):
    """An operator login that leaves its transaction open (autocommit off)."""
    conn = connect_as("operator")
    conn.autocommit = False
    yield conn
    conn.rollback()


def decisions(rows):
    return {r[0]: r[1] for r in rows}


def test_an_uncommitted_enqueue_costs_no_other_worker_its_period(impatient, careless):
    due(impatient, "u1", "u2")
    careless.execute("SELECT scrinalia.enqueue('u1')")  # left open

    _, rows = tick(impatient)
    assert decisions(rows) == {"u2": "ENQUEUED"}  # u1 left due: not waited on, not skipped

    careless.commit()  # the manual run took the slot: the held period is decided now
    _, rows = tick(impatient)
    assert decisions(rows) == {"u1": "SKIPPED"}
    assert "is active" in rows[0][5]


def test_a_held_period_is_enqueued_once_the_enqueue_rolls_back(impatient, careless):
    due(impatient, "u1", "u2")
    careless.execute("SELECT scrinalia.enqueue('u1')")
    tick(impatient)
    careless.rollback()
    _, rows = tick(impatient)
    assert decisions(rows) == {"u1": "ENQUEUED"}


def test_an_enqueue_waits_for_a_tick_deciding_its_worker_then_answers_slot_busy(db, db_dsn, connect_as):
    due(db, "u1")
    op = connect_as("operator")
    with psycopg.connect(db_dsn) as sched:
        sched.execute("SELECT * FROM scrinalia.due_schedules()")  # the tick holds u1's row
        sched.execute(
            "SELECT * FROM scrinalia.tick(ARRAY['u1'], %s::timestamptz[], 'test')", ([next_occurrence(db, "u1")],)
        ).fetchall()
        op.execute("SET lock_timeout = '300ms'")
        with pytest.raises(psycopg.errors.LockNotAvailable):
            op.execute("SELECT scrinalia.enqueue('u1')")
        sched.commit()
    with pytest.raises(psycopg.Error) as e:
        op.execute("SELECT scrinalia.enqueue('u1')")
    assert e.value.sqlstate == "SW010"


def test_a_retry_is_not_held_up_by_an_uncommitted_enqueue_of_its_worker(impatient, db_dsn):
    # (a REPEATABLE READ snapshot older than the scheduled run lets the enqueue in)
    make_worker(impatient, "u1")
    make_worker(impatient, "u2")
    with psycopg.connect(db_dsn) as rr:
        rr.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        rr.execute("SELECT 1")  # the snapshot: no run yet
        ids = {}
        for w in ("u1", "u2"):
            ids[w] = impatient.execute(
                "INSERT INTO scrinalia.archive_worker_runs (worker_name, trigger, scheduled_for, status,"
                " finished_at, retry_pending) VALUES (%s, 'SCHEDULE', now(), 'FAILED', now(), true)"
                " RETURNING run_id",
                (w,),
            ).fetchone()[0]
        rr.execute("SELECT scrinalia.enqueue('u1')")
        made = impatient.execute("SELECT retry_of FROM scrinalia.create_retries()").fetchall()
        assert made == [(ids["u2"],)]  # u1's retry stays owed, not waited on
        rr.rollback()
    made = impatient.execute("SELECT retry_of FROM scrinalia.create_retries()").fetchall()
    assert made == [(ids["u1"],)]


def test_a_held_scheduler_state_row_does_not_stop_the_tick_or_the_heartbeat(impatient, db_dsn):
    due(impatient, "u2")
    with psycopg.connect(db_dsn) as other:
        other.execute("UPDATE scrinalia.scheduler_state SET ticks = ticks")  # left open
        _, rows = tick(impatient)
        assert decisions(rows) == {"u2": "ENQUEUED"}
        impatient.execute("SELECT pg_advisory_lock(scrinalia.scheduler_lock_key())")
        assert impatient.execute("SELECT scrinalia.scheduler_heartbeat('s1', NULL)").fetchone()[0] is True
        other.rollback()
    assert impatient.execute("SELECT scrinalia.scheduler_heartbeat('s1', NULL)").fetchone()[0] is True
    assert impatient.execute("SELECT heartbeat_by FROM scrinalia.scheduler_state").fetchone()[0] == "s1"


def test_a_held_schedule_row_costs_no_other_worker_its_period(impatient, careless):
    due(impatient, "u1", "u2")
    careless.execute("SELECT scrinalia.set_schedule_enabled('u1', true, 'careless')")  # left open
    _, rows = tick(impatient)
    assert decisions(rows) == {"u2": "ENQUEUED"}
    careless.commit()
    _, rows = tick(impatient)
    assert decisions(rows) == {"u1": "ENQUEUED"}


def health_reason(conn, grace="0 seconds"):
    return conn.execute("SELECT reason FROM scrinalia.scheduler_health(%s::interval)", (grace,)).fetchone()[0] or ""


def test_health_names_a_session_idle_in_transaction_holding_a_due_schedule(impatient, careless, role_logins):
    due(impatient, "u1", "u2")
    careless.execute("SELECT scrinalia.enqueue('u1')")
    pid = careless.info.backend_pid
    reason = health_reason(impatient)
    assert f"pid {pid}" in reason
    assert role_logins["operator"] in reason
    assert "idle in transaction" in reason
    assert "the schedule of u1" in reason
    assert "u2" not in reason.split(f"pid {pid}")[1].split(";")[0]  # names only what it holds
    careless.rollback()
    assert f"pid {pid}" not in health_reason(impatient)


def test_health_names_the_holder_of_the_scheduler_state_row(impatient, db_dsn):
    with psycopg.connect(db_dsn) as other:
        other.execute("UPDATE scrinalia.scheduler_state SET ticks = ticks")
        reason = health_reason(impatient)
        assert f"pid {other.info.backend_pid}" in reason
        assert "the scheduler-state row" in reason
        other.rollback()


def test_health_does_not_name_a_holder_before_the_grace(impatient, careless):
    due(impatient, "u1")
    careless.execute("SELECT scrinalia.enqueue('u1')")
    assert f"pid {careless.info.backend_pid}" not in health_reason(impatient, "1 hour")


def test_status_names_the_session_that_holds_a_due_schedule(impatient, careless, db_dsn, role_logins):
    from helpers import cli

    due(impatient, "u1")
    impatient.execute("INSERT INTO scrinalia.settings (name, value) VALUES ('SCHEDULE_OVERDUE_GRACE', '0 seconds')")
    careless.execute("SELECT scrinalia.enqueue('u1')")

    def health_line():
        out = cli("status", dsn=db_dsn).out
        line = next(ln for ln in out.splitlines() if ln.startswith("health:"))
        return line if f"pid {careless.info.backend_pid}" in line else None

    # (the grace is at least a second: overdue_grace() has a floor)
    health = wait_for(health_line, timeout=15, interval=0.5, what="status names the open transaction")
    assert f"pid {careless.info.backend_pid} (login {role_logins['operator']}) idle in transaction" in health
    assert "the schedule of u1" in health
