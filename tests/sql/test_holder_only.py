"""Only the lock holder decides: the tick, setting aside, the retries, the reaper and
the heartbeat are refused (SW032, nothing written) to every session that is neither the
holder of the scheduler lock nor the work session its heartbeat names, whatever its
groups. The attacks are those a runner login ran against the previous release."""

from __future__ import annotations

import psycopg
import pytest

from helpers import claim, finish, make_worker, put_schedule, raises_sqlstate, set_next_run, table_fingerprints, tick

NOT_THE_SCHEDULER = "SW032"
FAR = "9999-01-01 00:00+00"

# each scheduler function, called as an attacker would (arguments that would decide)
CALLS = {
    "due_schedules": "SELECT * FROM scrinalia.due_schedules()",
    "tick": f"SELECT * FROM scrinalia.tick(ARRAY['ocr'], ARRAY['{FAR}'::timestamptz])",
    "tick_due_at": "SELECT * FROM scrinalia.tick_due_at(now(), ARRAY['ocr'], ARRAY[now() + interval '1 day'])",
    "tick_v2": f"SELECT * FROM scrinalia.tick_v2(ARRAY['ocr'], ARRAY['{FAR}'::timestamptz])",
    "tick_due_at_v2": "SELECT * FROM scrinalia.tick_due_at_v2(now(), ARRAY['ocr'], ARRAY[now() + interval '1 day'])",
    "set_schedules_aside": "SELECT * FROM scrinalia.set_schedules_aside(ARRAY['ocr'], ARRAY['forged'])",
    "create_retries": "SELECT * FROM scrinalia.create_retries()",
    "reap_expired_leases": "SELECT * FROM scrinalia.reap_expired_leases()",
}


@pytest.fixture
def due(db):
    """ocr's '0 3 * * *' schedule, armed and due a minute ago."""
    make_worker(db)
    put_schedule(db, "ocr", "0 3 * * *", "UTC")
    tick(db)  # arm (the owner's session: the tests' own)
    set_next_run(db, "ocr", "1 minute")
    return "ocr"


def _pid(conn: psycopg.Connection) -> int:
    return conn.execute("SELECT pg_backend_pid()").fetchone()[0]


def _take_key(conn: psycopg.Connection) -> None:
    assert conn.execute("SELECT pg_try_advisory_lock(scrinalia.scheduler_lock_key())").fetchone()[0]


def _scheduler(connect_as, group: str = "scheduler") -> tuple[psycopg.Connection, psycopg.Connection]:
    """A scheduler as the daemon is one: a lock session holding the key whose heartbeat
    vouches for a work session of the same login."""
    lock, work = connect_as(group), connect_as(group)
    _take_key(lock)
    assert lock.execute("SELECT scrinalia.scheduler_heartbeat('s', %s)", (_pid(work),)).fetchone()[0] is True
    return lock, work


def _runs(db) -> int:
    return db.execute("SELECT count(*) FROM scrinalia.archive_worker_runs").fetchone()[0]


def test_a_runner_cannot_stop_schedules_with_far_instants(db, connect_as, due):
    runner = connect_as("runner")
    before = table_fingerprints(db)
    with raises_sqlstate(NOT_THE_SCHEDULER, "due_schedules", "is not the scheduler"):
        with runner.transaction():
            rows = runner.execute("SELECT worker_name FROM scrinalia.due_schedules()").fetchall()
            runner.execute(
                "SELECT * FROM scrinalia.tick(%s::text[], %s::timestamptz[], 'x')",
                ([r[0] for r in rows], [FAR] * len(rows)),
            )
    # tick alone too (no due_schedules first)
    with raises_sqlstate(NOT_THE_SCHEDULER, "tick"):
        runner.execute(CALLS["tick"])
    assert table_fingerprints(db) == before
    decisions = tick(db)[1]  # the real scheduler still fires it
    assert [d[1] for d in decisions] == ["ENQUEUED"]


def test_a_runner_cannot_fire_a_schedule_by_ticking(db, connect_as, due):
    runner = connect_as("runner")
    for _ in range(4):
        with raises_sqlstate(NOT_THE_SCHEDULER, "tick"):
            runner.execute("SELECT * FROM scrinalia.tick(ARRAY['ocr'], ARRAY[now() + interval '1 millisecond'], 'x')")
    assert _runs(db) == 0


def test_a_runner_cannot_set_a_due_schedule_aside(db, connect_as, due):
    runner = connect_as("runner")
    with raises_sqlstate(NOT_THE_SCHEDULER, "set_schedules_aside"):
        runner.execute(CALLS["set_schedules_aside"])
    assert db.execute("SELECT arm_error FROM scrinalia.archive_worker_schedules").fetchone()[0] is None
    assert [d[1] for d in tick(db)[1]] == ["ENQUEUED"]


def test_a_key_holder_that_ticks_nothing_cannot_heartbeat(db, connect_as, due):
    """The runner login takes the free key and heartbeats alone: refused, nothing
    recorded, so the health does not read it as a live scheduler's heartbeat."""
    runner = connect_as("runner")
    _take_key(runner)
    before = table_fingerprints(db)
    with raises_sqlstate(NOT_THE_SCHEDULER, "scheduler_heartbeat", "work session NULL"):
        runner.execute("SELECT scrinalia.scheduler_heartbeat('x')")
    # a work session that is not its own (another login's, or itself) vouches for nothing
    for other in (_pid(connect_as("operator")), _pid(runner), 1):
        with raises_sqlstate(NOT_THE_SCHEDULER, "scheduler_heartbeat", f"pid {other}"):
            runner.execute("SELECT scrinalia.scheduler_heartbeat('x', %s)", (other,))
    assert table_fingerprints(db) == before
    assert db.execute("SELECT heartbeat_pid FROM scrinalia.scheduler_state").fetchone()[0] is None


def test_a_session_that_does_not_hold_the_key_cannot_heartbeat(db, connect_as):
    lock, work = _scheduler(connect_as)
    before = table_fingerprints(db)
    for group in ("scheduler", "runner", "operator"):
        other = connect_as(group)
        with raises_sqlstate(NOT_THE_SCHEDULER, "does not hold the scheduler lock", f"pid {_pid(lock)} does"):
            other.execute("SELECT scrinalia.scheduler_heartbeat('x', %s)", (_pid(work),))
    # the vouched work session is not the holder either
    with raises_sqlstate(NOT_THE_SCHEDULER, "does not hold the scheduler lock"):
        work.execute("SELECT scrinalia.scheduler_heartbeat('x', %s)", (_pid(work),))
    assert table_fingerprints(db) == before


@pytest.mark.parametrize("group", ["runner", "operator", "scheduler"])
@pytest.mark.parametrize("held", [False, True], ids=["nobody-holds", "a-scheduler-holds"])
@pytest.mark.parametrize("function", sorted(CALLS))
def test_every_group_gets_sw032_from_every_scheduler_function(db, connect_as, due, group, held, function):
    if held:
        _scheduler(connect_as)
    caller = connect_as(group)
    before = table_fingerprints(db)
    with raises_sqlstate(NOT_THE_SCHEDULER, function, "is not the scheduler"):
        caller.execute(CALLS[function])
    assert table_fingerprints(db) == before


@pytest.mark.parametrize("function", sorted(CALLS))
def test_a_login_in_no_group_is_refused_before_the_fence(db, connect_as, due, function):
    nobody = connect_as("nobody")
    before = table_fingerprints(db)
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        nobody.execute(CALLS[function])
    assert table_fingerprints(db) == before


def test_the_holder_and_the_work_session_it_vouches_for_decide(db, connect_as, due):
    lock, work = _scheduler(connect_as, "runner")  # the ADR: a runner's login may run the scheduler
    decisions = tick(work)[1]
    assert [d[1] for d in decisions] == ["ENQUEUED"]
    # a failed scheduled attempt, then its retry, then an expired lease reaped: all on the work session
    run_id, token, *_ = claim(db)
    finish(db, run_id, token, "FAILED", "boom")
    assert [r[0] for r in work.execute("SELECT retry_of FROM scrinalia.create_retries()")] == [run_id]
    db.execute("UPDATE scrinalia.archive_worker_runs SET not_before = now() WHERE retry_of = %s", (run_id,))
    retry_id, *_ = claim(db, lease="1 second")
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET lease_expires_at = now() - interval '1 second' WHERE run_id = %s",
        (retry_id,),
    )
    assert [r[0] for r in work.execute("SELECT run_id FROM scrinalia.reap_expired_leases()")] == [retry_id]
    # the lock session itself may too
    lock.execute("SELECT * FROM scrinalia.set_schedules_aside(ARRAY[]::text[], ARRAY[]::text[])")
    # another session of the same login, not vouched for, may not
    with raises_sqlstate(NOT_THE_SCHEDULER, "create_retries"):
        connect_as("runner").execute(CALLS["create_retries"])


def test_a_vouch_ends_with_the_lock(db, connect_as, due):
    lock, work = _scheduler(connect_as)
    work.execute("SELECT * FROM scrinalia.create_retries()")
    lock.execute("SELECT pg_advisory_unlock(scrinalia.scheduler_lock_key())")
    with raises_sqlstate(NOT_THE_SCHEDULER, "create_retries"):
        work.execute(CALLS["create_retries"])
    # a new holder's record replaces the old one: the old work session stays out
    new_lock, new_work = _scheduler(connect_as)
    with raises_sqlstate(NOT_THE_SCHEDULER, "tick"):
        work.execute(CALLS["tick"])
    assert [d[1] for d in tick(new_work)[1]] == ["ENQUEUED"]


def test_a_holder_whose_lock_session_ended_vouches_for_nothing(db, connect_as, due):
    """The record names a holder pid that no longer holds the key: ignored, even when a
    hand write (or a stale row) names the caller as the work session."""
    lock, work = _scheduler(connect_as)
    lock.close()
    with raises_sqlstate(NOT_THE_SCHEDULER, "due_schedules"):
        work.execute(CALLS["due_schedules"])
    db.execute("UPDATE scrinalia.scheduler_state SET heartbeat_work_pid = %s", (_pid(work),))
    with raises_sqlstate(NOT_THE_SCHEDULER, "reap_expired_leases"):
        work.execute(CALLS["reap_expired_leases"])
    assert _runs(db) == 0


def test_the_schema_owner_is_not_fenced(db, due):
    """The tests' superuser (and the schema's owner) could write the tables directly:
    the fence is against the groups."""
    assert db.execute("SELECT scrinalia.session_is_owner()").fetchone()[0] is True
    assert [d[1] for d in tick(db)[1]] == ["ENQUEUED"]
    db.execute("SELECT pg_advisory_lock(scrinalia.scheduler_lock_key())")
    try:
        assert db.execute("SELECT scrinalia.scheduler_heartbeat('owner', NULL)").fetchone()[0] is True
    finally:
        db.execute("SELECT pg_advisory_unlock(scrinalia.scheduler_lock_key())")


def test_the_daemon_reads_sw032_on_its_work_session_as_a_lost_lock(connect_as, due):
    from scrinalia_workers.errors import LockLost
    from scrinalia_workers.scheduler.daemon import Scheduler

    with pytest.raises(psycopg.Error) as refused:
        connect_as("runner").execute(CALLS["create_retries"])
    with pytest.raises(LockLost, match="not the scheduler"):
        Scheduler("dbname=unused")._survive(refused.value)


def test_the_daemon_sessions_read_a_refused_heartbeat_as_the_lock_lost(db, db_dsn, role_logins):
    from scrinalia_workers.scheduler.sessions import Sessions

    s = Sessions(psycopg.conninfo.make_conninfo(db_dsn, user=role_logins["scheduler"]), "fence-test")
    try:
        assert s.acquire(5.0) is True
        assert db.execute("SELECT heartbeat_pid, heartbeat_work_pid FROM scrinalia.scheduler_state").fetchone() == (
            s.lock_pid,
            s.work_pid,
        )
        assert s.heartbeat() is True
        # its work session ends: the heartbeat vouches for nothing, so the lock is not ours to use
        db.execute("SELECT pg_terminate_backend(%s, 5000)", (s.work_pid,))  # waits until it is gone
        assert s.heartbeat() is False
        # the lock released: SW032, read as lost
        s.release()
        assert s.heartbeat() is False
    finally:
        s.close()
