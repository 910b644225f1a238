"""Who may keep the scheduler lock: a session that is not a scheduler is ended at once,
a superuser's never; the standby waits first in the lock's queue; a session that lost
the lock is refused with SW031."""

from __future__ import annotations

import threading

import psycopg
import pytest

from scrinalia_workers.testkit.waiting import wait_for

KEY = "7305764011424514049"  # scrinalia.scheduler_lock_key(): public knowledge


def _evict(conn, seen=None):
    return conn.execute("SELECT evicted, holder_pid, reason FROM scrinalia.evict_lock_holder(%s)", (seen,)).fetchone()


def _alive(conn) -> bool:
    try:
        conn.execute("SELECT 1")
        return True
    except psycopg.OperationalError:
        return False


def test_a_superuser_holding_the_key_is_never_ended_and_health_names_it(db, connect_as):
    assert db.execute(f"SELECT pg_try_advisory_lock({KEY})").fetchone()[0]
    me = db.execute("SELECT pg_backend_pid()").fetchone()[0]
    runner = connect_as("runner")
    for call in (
        "SELECT evicted, reason FROM scrinalia.evict_stale_scheduler()",
        "SELECT evicted, reason FROM scrinalia.evict_lock_holder(NULL)",
    ):
        evicted, reason = runner.execute(call).fetchone()
        assert not evicted and "superuser" in reason and f"pg_terminate_backend({me})" in reason
    # with the pid seen before, and a stale window long past: still never
    db.execute("INSERT INTO scrinalia.settings (name, value) VALUES ('SCHEDULER_STALE_AFTER', '1 second')")
    assert _evict(runner, me)[0] is False
    assert _alive(db)
    healthy, reason, role = (
        connect_as("reader").execute("SELECT healthy, reason, holder_role FROM scrinalia.scheduler_health()").fetchone()
    )
    assert not healthy and f"pid {me}" in reason and "superuser" in reason and "no heartbeat" in reason


def test_an_idle_holder_that_never_heartbeats_is_ended_at_once(db, connect_as):
    squatter = connect_as("nobody")
    assert squatter.execute(f"SELECT pg_try_advisory_lock({KEY})").fetchone()[0]
    pid = squatter.execute("SELECT pg_backend_pid()").fetchone()[0]
    healthy, reason = db.execute("SELECT healthy, reason FROM scrinalia.scheduler_health()").fetchone()
    assert not healthy and "sw_login_nobody" in reason
    # no stale window: its session began a moment ago
    evicted, holder, reason = _evict(connect_as("scheduler"))
    assert evicted and holder == pid and "without being a scheduler" in reason
    wait_for(lambda: not _alive(squatter), timeout=5, what="the squatter's session ended")


def test_a_runner_login_holding_the_key_without_heartbeat_is_not_a_scheduler(db, connect_as):
    runner = connect_as("runner")  # it may run the scheduler, but this session never heartbeats
    assert runner.execute(f"SELECT pg_try_advisory_lock({KEY})").fetchone()[0]
    healthy, reason = db.execute("SELECT healthy, reason FROM scrinalia.scheduler_health()").fetchone()
    assert not healthy and "no heartbeat" in reason
    assert _evict(connect_as("scheduler"))[0] is True


def test_a_busy_holder_without_heartbeat_is_ended_at_the_second_look(db, connect_as, db_dsn, role_logins):
    squatter = connect_as("nobody")
    pid = squatter.execute("SELECT pg_backend_pid()").fetchone()[0]
    done = threading.Event()

    def busy():
        try:
            squatter.execute(f"SELECT pg_advisory_lock({KEY}), pg_sleep(30)")
        except psycopg.OperationalError:
            done.set()

    t = threading.Thread(target=busy, daemon=True)
    t.start()
    standby = connect_as("scheduler")
    wait_for(lambda: _evict(standby, -1)[1] == pid, timeout=5, what="the busy squatter on the key")
    evicted, holder, reason = _evict(standby)
    assert not evicted and holder == pid and "next look" in reason
    evicted, holder, _ = _evict(standby, pid)
    assert evicted and holder == pid
    assert done.wait(5)


def _take(conn, connect_as, name: str, wait: str) -> bool:
    """take_scheduler_lock as the scheduler calls it: vouching for a work session of its own."""
    work = connect_as("scheduler").execute("SELECT pg_backend_pid()").fetchone()[0]
    return conn.execute("SELECT scrinalia.take_scheduler_lock(%s, %s::interval, %s)", (name, wait, work)).fetchone()[0]


def test_a_live_scheduler_is_left_alone(db, connect_as):
    holder = connect_as("scheduler")
    assert _take(holder, connect_as, "a", "1 second")
    pid = holder.execute("SELECT pg_backend_pid()").fetchone()[0]
    evicted, got, reason = _evict(connect_as("runner"), pid)
    assert not evicted and got == pid and "alive" in reason
    assert db.execute("SELECT healthy FROM scrinalia.scheduler_health()").fetchone()[0]


def test_the_standby_waits_first_in_the_queue_and_a_try_lock_fails_behind_it(db, connect_as):
    holder = connect_as("scheduler")
    assert _take(holder, connect_as, "a", "1 second")
    standby, squatter = connect_as("scheduler"), connect_as("nobody")
    got: list[bool] = []
    t = threading.Thread(
        target=lambda: got.append(_take(standby, connect_as, "b", "20 seconds")),
        daemon=True,
    )
    t.start()
    wait_for(
        lambda: (
            db.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objsubid = 1"
            ).fetchone()[0]
            == 1
        ),
        timeout=5,
        what="the standby waiting in the lock's queue",
    )
    # a try-lock behind a waiting request fails, though nobody but the holder has it
    assert squatter.execute(f"SELECT pg_try_advisory_lock({KEY})").fetchone()[0] is False
    holder.execute(f"SELECT pg_advisory_unlock({KEY})")
    t.join(timeout=10)
    assert got == [True]
    pid = standby.execute("SELECT pg_backend_pid()").fetchone()[0]
    row = db.execute("SELECT holder_pid, heartbeat_pid, heartbeat_by FROM scrinalia.scheduler_status()").fetchone()
    assert row == (pid, pid, "b")  # held, and known as a scheduler from the same statement
    assert squatter.execute(f"SELECT pg_try_advisory_lock({KEY})").fetchone()[0] is False


def test_the_wait_for_the_lock_is_bounded_and_leaves_lock_timeout_as_it_was(connect_as):
    holder = connect_as("scheduler")
    assert _take(holder, connect_as, "a", "1 second")
    standby = connect_as("scheduler")
    standby.execute("SET lock_timeout = '7s'")
    assert _take(standby, connect_as, "b", "0.2 seconds") is False
    assert standby.execute("SHOW lock_timeout").fetchone()[0] == "7s"


def test_a_session_that_lost_the_lock_is_refused_with_sw031(db, connect_as):
    lock = connect_as("scheduler")
    assert _take(lock, connect_as, "a", "1 second")
    lock_pid = lock.execute("SELECT pg_backend_pid()").fetchone()[0]
    work = connect_as("scheduler")  # its tick session, still open
    work.execute("SELECT scrinalia.check_scheduler_lock(%s)", (lock_pid,))
    lock.close()  # its lock session ended (evicted, or the server's idle timeout)
    wait_for(
        lambda: db.execute("SELECT NOT lock_held FROM scrinalia.scheduler_status()").fetchone()[0],
        timeout=5,
        what="the lock gone with its session",
    )
    with pytest.raises(psycopg.Error) as e:
        work.execute("SELECT scrinalia.check_scheduler_lock(%s)", (lock_pid,))
    assert e.value.sqlstate == "SW031" and f"not by pid {lock_pid}" in str(e.value)
