"""0.1.0's scheduler predates the heartbeat's vouch: it takes the lock on one session
("scrinalia-scheduler lock") and decides on another ("scrinalia-scheduler") of the same
login, and never heartbeats. Through a later migrate, under a login that is only a
scheduler, that work session must stay the scheduler (or the old process is refused on
every pass and loops), and nothing else may ride on it."""

from __future__ import annotations

import psycopg
import pytest

from helpers import make_worker, put_schedule, raises_sqlstate, set_next_run, tick
from scrinalia_workers.testkit.waiting import wait_for

NOT_THE_SCHEDULER = "SW032"
OLD_LOCK, OLD_WORK = "scrinalia-scheduler lock", "scrinalia-scheduler"


@pytest.fixture
def session(db_dsn, role_logins):
    opened: list[psycopg.Connection] = []

    def _open(group: str, application_name: str) -> psycopg.Connection:
        dsn = psycopg.conninfo.make_conninfo(db_dsn, user=role_logins[group])
        conn = psycopg.connect(dsn, autocommit=True, application_name=application_name)
        opened.append(conn)
        return conn

    yield _open
    for c in opened:
        c.close()


@pytest.fixture
def due(db):
    make_worker(db)
    put_schedule(db, "ocr", "0 3 * * *", "UTC")
    tick(db)  # arm (the owner's session)
    set_next_run(db, "ocr", "1 minute")
    return "ocr"


def _pid(conn: psycopg.Connection) -> int:
    return conn.execute("SELECT pg_backend_pid()").fetchone()[0]


def _old_holder(session, group: str = "scheduler") -> psycopg.Connection:
    lock = session(group, OLD_LOCK)
    assert lock.execute("SELECT pg_try_advisory_lock(scrinalia.scheduler_lock_key())").fetchone()[0]
    return lock


def test_the_old_schedulers_work_session_ticks_reaps_and_retries(db, session, due):
    _old_holder(session)
    work = session("scheduler", OLD_WORK)
    # what 0.1.0's tick calls, in its order
    work.execute("SELECT * FROM scrinalia.reap_expired_leases()")
    work.execute("SELECT * FROM scrinalia.create_retries()")
    assert [d[1] for d in tick(work)[1]] == ["ENQUEUED"]


def test_no_other_session_rides_on_an_old_holder(db, session, due):
    lock = _old_holder(session)
    # another login under the old work session's name, the holder's login under another name
    for group, name in (("runner", OLD_WORK), ("operator", OLD_WORK), ("scheduler", "psql")):
        with raises_sqlstate(NOT_THE_SCHEDULER, "reap_expired_leases", "is not the scheduler"):
            session(group, name).execute("SELECT * FROM scrinalia.reap_expired_leases()")
    # a holder named otherwise is no old scheduler either
    lock.execute("SELECT pg_advisory_unlock(scrinalia.scheduler_lock_key())")
    other = session("scheduler", "not-a-scheduler")
    assert other.execute("SELECT pg_try_advisory_lock(scrinalia.scheduler_lock_key())").fetchone()[0]
    with raises_sqlstate(NOT_THE_SCHEDULER, "due_schedules"):
        tick(session("scheduler", OLD_WORK))
    assert db.execute("SELECT count(*) FROM scrinalia.archive_worker_runs").fetchone()[0] == 0


def test_a_holder_that_heartbeats_vouches_by_its_heartbeat_alone(db, session, due):
    lock = _old_holder(session)
    vouched, unvouched = session("scheduler", OLD_WORK), session("scheduler", OLD_WORK)
    assert lock.execute("SELECT scrinalia.scheduler_heartbeat('s', %s)", (_pid(vouched),)).fetchone()[0]
    with raises_sqlstate(NOT_THE_SCHEDULER, "create_retries"):
        unvouched.execute("SELECT * FROM scrinalia.create_retries()")
    vouched.execute("SELECT * FROM scrinalia.create_retries()")


def test_an_old_work_session_is_refused_once_its_holder_let_go(db, session, due):
    lock = _old_holder(session)
    work = session("scheduler", OLD_WORK)
    work.execute("SELECT * FROM scrinalia.create_retries()")
    lock.execute("SELECT pg_advisory_unlock(scrinalia.scheduler_lock_key())")
    with raises_sqlstate(NOT_THE_SCHEDULER, "due_schedules"):
        work.execute("SELECT * FROM scrinalia.due_schedules()")


def test_a_scheduler_of_this_release_ends_an_old_holder_and_takes_over(db, session, due):
    """An old holder never heartbeats: the standby's eviction ends it at once."""
    lock = _old_holder(session)
    pid = _pid(lock)
    standby = session("scheduler", "scrinalia-scheduler lock")
    evicted, holder, reason = standby.execute(
        "SELECT evicted, holder_pid, reason FROM scrinalia.evict_lock_holder(NULL)"
    ).fetchone()
    assert evicted and holder == pid, reason

    def ended() -> bool:
        try:
            lock.execute("SELECT 1")
            return False
        except psycopg.OperationalError:
            return True

    wait_for(ended, timeout=5, what="the old holder's session ended")
