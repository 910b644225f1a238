"""A takeover is clean: the new holder's heartbeat is recorded before it says it holds
the lock, even while the session of a holder that died still holds the scheduler-state
row (its last tick, inside tick_due_at(), until the instant); its first pass is never
refused; and no one, health or a standby, calls it "not a scheduler" meanwhile."""

from __future__ import annotations

import threading

import psycopg
import pytest

from scrinalia_workers.errors import LockLost
from scrinalia_workers.scheduler.sessions import Sessions
from scrinalia_workers.testkit.waiting import wait_for


def _waiting(db, pid: int) -> bool:
    """pid holds the scheduler's key and waits for a row lock (the state row)."""
    return db.execute(
        "SELECT scrinalia.scheduler_lock_holder() = %s AND EXISTS"
        " (SELECT 1 FROM pg_locks WHERE pid = %s AND NOT granted)",
        (pid, pid),
    ).fetchone()[0]


def _hold_state_row(db_dsn: str) -> psycopg.Connection:
    """The dead holder's tick: a transaction holding the scheduler-state row."""
    row = psycopg.connect(db_dsn)
    row.execute("SELECT 1 FROM scrinalia.scheduler_state FOR NO KEY UPDATE")
    return row


def test_a_new_holder_records_its_heartbeat_before_it_returns(db, db_dsn, connect_as):
    row = _hold_state_row(db_dsn)
    taker = connect_as("scheduler")
    pid = taker.execute("SELECT pg_backend_pid()").fetchone()[0]
    work = connect_as("scheduler").execute("SELECT pg_backend_pid()").fetchone()[0]
    got: list[bool] = []
    t = threading.Thread(
        target=lambda: got.append(
            taker.execute("SELECT scrinalia.take_scheduler_lock('new', interval '5 seconds', %s)", (work,)).fetchone()[
                0
            ]
        )
    )
    t.start()
    try:
        wait_for(lambda: _waiting(db, pid) or got, timeout=5, what="the new holder waiting for the state row")
        assert not got, "returned while the state row was held: its heartbeat was not recorded"
        # meanwhile: a scheduler taking over, for health and for a standby alike
        healthy, reason = db.execute("SELECT healthy, reason FROM scrinalia.scheduler_health()").fetchone()
        assert "not a scheduler" not in (reason or "") and "no heartbeat" not in (reason or ""), reason
        standby = connect_as("scheduler")
        for seen in (None, pid):
            evicted, _, reason = standby.execute(
                "SELECT evicted, holder_pid, reason FROM scrinalia.evict_lock_holder(%s)", (seen,)
            ).fetchone()
            assert not evicted, reason
    finally:
        row.commit()
        row.close()
        t.join(timeout=10)
    assert got == [True]
    assert db.execute("SELECT heartbeat_pid FROM scrinalia.scheduler_state").fetchone()[0] == pid


def test_a_row_held_too_long_leaves_the_heartbeat_unrecorded_and_the_daemon_says_so(db, db_dsn, role_logins):
    row = _hold_state_row(db_dsn)  # by hand, for good
    s = Sessions(psycopg.conninfo.make_conninfo(db_dsn, user=role_logins["scheduler"]), "takeover")
    try:
        with pytest.raises(LockLost, match="could not be recorded"):
            s.acquire(10.0)
        assert db.execute("SELECT heartbeat_pid FROM scrinalia.scheduler_state").fetchone()[0] is None
    finally:
        s.close()
        row.rollback()
        row.close()


def test_the_daemon_is_never_refused_its_first_pass(db, db_dsn, role_logins):
    row = _hold_state_row(db_dsn)
    s = Sessions(psycopg.conninfo.make_conninfo(db_dsn, user=role_logins["scheduler"]), "takeover")
    result: list[object] = []
    t = threading.Thread(target=lambda: result.append(s.acquire(10.0)))
    t.start()
    try:
        wait_for(lambda: s.lock_pid and _waiting(db, s.lock_pid) or result, timeout=5, what="the take waiting")
        assert not result
    finally:
        row.commit()
        row.close()
        t.join(timeout=15)
    try:
        assert result == [True]
        st = db.execute("SELECT heartbeat_pid, heartbeat_work_pid FROM scrinalia.scheduler_state").fetchone()
        assert st == (s.lock_pid, s.work_pid)  # the work session vouched for before the first pass
        s.work.execute("SELECT * FROM scrinalia.reap_expired_leases()")  # not SW032
        healthy, reason = db.execute("SELECT healthy, reason FROM scrinalia.scheduler_health()").fetchone()
        assert healthy, reason
    finally:
        s.close()
