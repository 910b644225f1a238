"""Issue 9 at the SQL surface: the retry owns its slot, bad input writes nothing, and the
health answer cannot be faked by a login that merely takes the lock key."""

from __future__ import annotations

import psycopg
import pytest
from psycopg.types.json import Jsonb

from helpers import (
    claim,
    finish,
    make_worker,
    put_schedule,
    raises_sqlstate,
    set_next_run,
    table_fingerprints,
    tick,
)

BIG = "x" * 10_000_000


@pytest.fixture
def failed_attempt(db):
    """A SCHEDULE attempt 1 that ended FAILED; no scheduler has passed since."""
    make_worker(db)
    put_schedule(db, "ocr", "0 2 * * *", "UTC")
    tick(db)  # arm
    set_next_run(db, "ocr", "1 minute")
    tick(db)
    run_id, token, *_ = claim(db)
    assert finish(db, run_id, token, "FAILED", "boom")[4] is True  # retry_pending
    return run_id


def test_manual_enqueue_refused_while_a_retry_is_owed_with_no_scheduler(db, failed_attempt):
    before = table_fingerprints(db)
    with raises_sqlstate("SW010", f"run #{failed_attempt} FAILED", "owed its retry"):
        db.execute("SELECT scrinalia.enqueue('ocr', '{}', 'CLI', 'ops')")
    assert table_fingerprints(db) == before
    # once the scheduler created the retry, the retry holds the slot the usual way
    retry_id = db.execute("SELECT run_id FROM scrinalia.create_retries()").fetchone()[0]
    with raises_sqlstate("SW010", f"run #{retry_id} QUEUED (SCHEDULE attempt 2/3"):
        db.execute("SELECT scrinalia.enqueue('ocr')")


@pytest.mark.parametrize(
    "sql, params, sqlstate, fragment",
    [
        ("SELECT scrinalia.put_settings('ocr', NULL)", (), "SW002", "not NULL"),
        ("SELECT scrinalia.put_settings('ocr', '{}', %s)", (BIG,), "SW002", "updated_by is 10000000 characters"),
        ("SELECT scrinalia.put_schedule('ocr', '0 2 * * *', 'UTC', '{}', true, %s)", (BIG,), "SW002", "updated_by"),
        ("SELECT scrinalia.set_schedule_enabled('ocr', false, %s)", ("y" * 201,), "SW002", "updated_by"),
        ("SELECT scrinalia.enqueue('ocr', '{}', 'CLI', %s)", (BIG,), "SW002", "requested_by"),
        ("SELECT scrinalia.enqueue('ocr', %s)", (Jsonb({"options": {"dpi": 10**400}}),), "SW002", "between -2^63"),
        ("SELECT scrinalia.enqueue('ocr', '{\"options\": {\"dpi\": 9223372036854775808}}')", (), "SW002", "dpi"),
        ("SELECT scrinalia.enqueue('ocr', '{\"options\": {\"threshold\": 1e400}}')", (), "SW002", "double precision"),
        ("SELECT scrinalia.put_settings('ocr', '{\"options\": {\"dpi\": -1e30}}')", (), "SW002", "dpi"),
        ("SELECT * FROM scrinalia.tick(ARRAY['ocr'], ARRAY['infinity']::timestamptz[])", (), "SW030", "finite"),
        ("SELECT * FROM scrinalia.tick(ARRAY['ocr'], ARRAY['-infinity']::timestamptz[])", (), "SW030", "finite"),
        ("SELECT * FROM scrinalia.due_schedules(0)", (), "SW030", "at least 1"),
        ("SELECT * FROM scrinalia.due_schedules(-5)", (), "SW030", "at least 1"),
        ("SELECT * FROM scrinalia.due_schedules(NULL)", (), "SW030", "at least 1"),
    ],
)
def test_bad_input_is_refused_and_writes_nothing(db, sql, params, sqlstate, fragment):
    make_worker(db)
    put_schedule(db, "ocr", "0 2 * * *", "UTC")
    before = table_fingerprints(db)
    with raises_sqlstate(sqlstate, fragment):
        db.execute(sql, params)
    assert table_fingerprints(db) == before


def test_cancelled_by_is_capped_like_every_actor(db):
    make_worker(db)
    run_id = db.execute("SELECT run_id FROM scrinalia.enqueue('ocr')").fetchone()[0]
    with raises_sqlstate("SW002", "cancelled_by"):
        db.execute("SELECT scrinalia.cancel_run(%s, %s)", (run_id, "z" * 201))
    assert (
        db.execute("SELECT status::text FROM scrinalia.cancel_run(%s, %s)", (run_id, "z" * 200)).fetchone()[0]
        == "CANCELLED"
    )


def _work_pid(conn) -> int:
    return conn.execute("SELECT pg_backend_pid()").fetchone()[0]


def test_an_outsider_holding_the_key_is_named_and_unhealthy(db, connect_as):
    outsider = connect_as("nobody")
    key = db.execute("SELECT scrinalia.scheduler_lock_key()").fetchone()[0]
    assert outsider.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]
    reader = connect_as("reader")
    st = reader.execute(
        "SELECT lock_held, holder_role, holder_is_scheduler FROM scrinalia.scheduler_status()"
    ).fetchone()
    assert st == (True, "sw_login_nobody", False)
    healthy, reason = reader.execute("SELECT healthy, reason FROM scrinalia.scheduler_health()").fetchone()
    assert healthy is False and "cannot run the scheduler" in reason and "sw_login_nobody" in reason
    # the outsider cannot write the heartbeat that would make it look alive
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        outsider.execute("SELECT scrinalia.scheduler_heartbeat('fake')")
    # a scheduler login that does not hold the lock is refused (SW032) and writes nothing
    sched = connect_as("scheduler")
    with raises_sqlstate("SW032"):
        sched.execute("SELECT scrinalia.scheduler_heartbeat('fake')")
    assert db.execute("SELECT heartbeat_at FROM scrinalia.scheduler_state").fetchone()[0] is None


def test_health_is_true_only_with_a_fresh_heartbeat_and_nothing_overdue(db, connect_as):
    sched = connect_as("scheduler")
    work = _work_pid(connect_as("scheduler"))  # the heartbeat vouches for the holder's work session
    assert sched.execute("SELECT pg_try_advisory_lock(scrinalia.scheduler_lock_key())").fetchone()[0]
    reader = connect_as("reader")
    # just took the lock: no heartbeat yet, but not stale either
    assert sched.execute("SELECT scrinalia.scheduler_heartbeat('s1', %s)", (work,)).fetchone()[0] is True
    assert reader.execute("SELECT healthy FROM scrinalia.scheduler_health()").fetchone()[0] is True
    # a stale heartbeat (the clock is data)
    db.execute("UPDATE scrinalia.scheduler_state SET heartbeat_at = now() - interval '10 minutes'")
    healthy, reason = reader.execute("SELECT healthy, reason FROM scrinalia.scheduler_health()").fetchone()
    assert not healthy and "heartbeat is stale" in reason
    sched.execute("SELECT scrinalia.scheduler_heartbeat('s1', %s)", (work,))
    assert reader.execute("SELECT healthy FROM scrinalia.scheduler_health()").fetchone()[0] is True
    # an enabled schedule overdue beyond the grace
    make_worker(db)
    put_schedule(db, "ocr", "0 2 * * *", "UTC")
    db.execute("UPDATE scrinalia.archive_worker_schedules SET next_run_at = now() - interval '5 minutes'")
    healthy, reason, overdue = reader.execute(
        "SELECT healthy, reason, overdue_schedules FROM scrinalia.scheduler_health()"
    ).fetchone()
    assert not healthy and overdue == 1 and "overdue" in reason and "ocr" in reason
    assert reader.execute("SELECT healthy FROM scrinalia.scheduler_health(interval '1 hour')").fetchone()[0] is True
    # a schedule set aside for an error
    db.execute(
        "UPDATE scrinalia.archive_worker_schedules SET next_run_at = now() + interval '1 hour',"
        " arm_error = 'unknown zone', arm_error_since = now(), arm_retry_at = now() + interval '1 minute'"
    )
    healthy, reason, aside = reader.execute(
        "SELECT healthy, reason, set_aside_schedules FROM scrinalia.scheduler_health()"
    ).fetchone()
    assert not healthy and aside == 1 and "unknown zone" in reason


def test_evict_ends_only_a_stale_holder(db, connect_as):
    db.execute("INSERT INTO scrinalia.settings (name, value) VALUES ('SCHEDULER_STALE_AFTER', '1 second')")
    holder = connect_as("scheduler")
    work = _work_pid(connect_as("scheduler"))
    assert holder.execute("SELECT pg_try_advisory_lock(scrinalia.scheduler_lock_key())").fetchone()[0]
    holder.execute("SELECT scrinalia.scheduler_heartbeat('h', %s)", (work,))
    standby = connect_as("runner")  # a runner login may run the scheduler (ADR 0015)
    evicted, reason = standby.execute("SELECT evicted, reason FROM scrinalia.evict_stale_scheduler()").fetchone()
    assert not evicted and "alive" in reason
    db.execute("UPDATE scrinalia.scheduler_state SET heartbeat_at = now() - interval '1 minute'")
    evicted, reason = standby.execute("SELECT evicted, reason FROM scrinalia.evict_stale_scheduler()").fetchone()
    assert evicted and "stale holder" in reason
    with pytest.raises(psycopg.OperationalError):
        holder.execute("SELECT 1")
    assert db.execute("SELECT lock_held FROM scrinalia.scheduler_status()").fetchone()[0] is False
    # a reader cannot evict anybody
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        connect_as("reader").execute("SELECT * FROM scrinalia.evict_stale_scheduler()")
