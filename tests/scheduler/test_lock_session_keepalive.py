"""The holder's lock session is ended by the server when its process sends nothing on it
for holder_idle_limit() (a frozen holder frees the lock within seconds, with no
right to end a session), and kept by the keepalive thread however long the passes keep
the loop away from it (a long chunk in the database). Its work session is ended when
idle that long inside a transaction (a holder frozen inside a tick frees the chunk's
rows), and kept while the loop computes inside one (a chunk's cron work)."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from helpers import YEARLY, make_worker, put_schedule
from scrinalia_workers.admin.migrate import rollback
from scrinalia_workers.errors import SchemaMismatch
from scrinalia_workers.scheduler.sessions import Sessions
from scrinalia_workers.testkit.waiting import wait_for

pytestmark = pytest.mark.slow


def _holder(db) -> int | None:
    return db.execute("SELECT scrinalia.scheduler_lock_holder()").fetchone()[0]


# a hung loop, for the test: the keepalive stops this long after the loop's last sign
LOOP_SILENT = 1.0


@pytest.fixture
def held(db, db_dsn, role_logins):
    s = Sessions(
        psycopg.conninfo.make_conninfo(db_dsn, user=role_logins["scheduler"]),
        "keepalive-test",
        loop_silent_after=LOOP_SILENT,
    )
    assert s.acquire(5.0)
    assert _holder(db) == s.lock_pid
    yield s
    s.close()


def _keep_looping(s: Sessions, stop: threading.Event) -> None:
    """The loop's signs of life (its heartbeats between chunks), as a pass makes them."""
    while not stop.wait(LOOP_SILENT / 4):
        s.looped_at = time.monotonic()


def test_a_busy_holder_keeps_its_lock_session_past_the_idle_limit(db, held):
    assert (
        held.lock_idle_limit
        == db.execute("SELECT extract(epoch FROM scrinalia.holder_idle_limit())::float8").fetchone()[0]
    )
    # a pass that keeps the loop away from the lock session for longer than the limit:
    # one statement on the work session, as a long chunk in the database would be (the
    # loop's other signs of life, its heartbeats between chunks, by a thread here)
    stop = threading.Event()
    looping = threading.Thread(target=_keep_looping, args=(held, stop))
    looping.start()
    try:
        held.work.execute("SELECT pg_sleep(%s)", (held.lock_idle_limit + 2,))
    finally:
        stop.set()
        looping.join()
    assert held.heartbeat()
    assert _holder(db) == held.lock_pid


def test_a_silent_lock_session_is_ended_by_the_server_within_the_limit(db, held):
    assert held.heartbeat()
    held._keepalive.end()  # what a frozen process sends: nothing
    silent_since = held.sent_at
    wait_for(lambda: _holder(db) is None, timeout=held.lock_idle_limit + 3, what="the lock freed")
    assert time.monotonic() - silent_since <= held.lock_idle_limit + 1
    assert not db.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (held.lock_pid,)).fetchone()
    # (ended idle: 57P05 from 14 on; on 13 ended idle inside its transaction, 25P03)
    with pytest.raises((psycopg.OperationalError, psycopg.errors.IdleInTransactionSessionTimeout)):
        held.heartbeat()


def _row_locked(db) -> bool:
    return not db.execute("SELECT 1 FROM scrinalia.archive_worker_schedules FOR UPDATE SKIP LOCKED").fetchone()


@pytest.fixture
def schedule(db):
    """A schedule due: a chunk's due query (due_schedules) row-locks it."""
    make_worker(db, "ocr")
    put_schedule(db, "ocr", YEARLY, "UTC")
    db.execute("UPDATE scrinalia.archive_worker_schedules SET next_run_at = now() - interval '1 minute'")


DUE = "SELECT worker_name FROM scrinalia.due_schedules(10)"


def test_the_work_session_computing_inside_a_transaction_is_kept_past_the_limit(db, held, schedule):
    with held.work.transaction():
        assert held.work.execute(DUE).fetchall() == [("ocr",)]
        stop = threading.Event()
        looping = threading.Thread(target=_keep_looping, args=(held, stop))
        looping.start()
        try:
            with held.computing():  # a chunk's cron work, longer than the limit
                time.sleep(held.lock_idle_limit + 2)
        finally:
            stop.set()
            looping.join()
        assert _row_locked(db)
        held.work.execute("SELECT 1")
    assert not _row_locked(db)
    assert held.heartbeat()


def test_a_tick_transaction_left_idle_is_ended_by_the_server_within_the_limit(db, held, schedule):
    held.work.execute("BEGIN")
    assert held.work.execute(DUE).fetchall() == [("ocr",)]
    idle_since = time.monotonic()
    assert _row_locked(db)
    # frozen inside the transaction: nothing more is sent on the work session
    wait_for(lambda: not _row_locked(db), timeout=held.lock_idle_limit + 3, what="the rows freed")
    assert time.monotonic() - idle_since <= held.lock_idle_limit + 1
    assert not db.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (held.work_pid,)).fetchone()


def test_a_hung_loop_stops_the_keepalive_and_the_server_ends_the_lock_session(db, held):
    # the loop gives no sign of life (no heartbeat, no wait) from here on
    hung_at = held.looped_at = time.monotonic()
    wait_for(lambda: _holder(db) is None, timeout=LOOP_SILENT + held.lock_idle_limit + 3, what="the lock freed")
    assert time.monotonic() - hung_at >= held.lock_idle_limit  # kept alive a while, then let go
    assert time.monotonic() - hung_at <= LOOP_SILENT + held.lock_idle_limit + 1.5


def test_the_lock_sessions_limit_on_13_is_the_one_inside_a_transaction(db):
    v14 = db.execute("SELECT current_setting('server_version_num')::int >= 140000").fetchone()[0]
    # the other sessions' limit is set on 13 too (only the transaction's there)
    assert db.execute("SELECT scrinalia.limit_scheduler_session(interval '1 second')").fetchone()[0] is not None
    limit = db.execute("SELECT scrinalia.limit_scheduler_lock_session()").fetchone()[0]
    try:
        assert limit == db.execute("SELECT scrinalia.holder_idle_limit()").fetchone()[0]
        setting = "idle_session_timeout" if v14 else "idle_in_transaction_session_timeout"
        assert db.execute(f"SHOW {setting}").fetchone()[0] == "5s"
    finally:
        if v14:
            db.execute("RESET idle_session_timeout")
        db.execute("RESET idle_in_transaction_session_timeout")


def test_on_13_the_holders_lock_session_is_never_idle_outside_a_transaction(db, held):
    """PostgreSQL 13 limits only a session idle inside a transaction: the holder's lock
    session stays inside one between its statements, and what it writes (its
    heartbeat) is committed all the same; its LISTEN is on a session of its own."""
    v13 = db.execute("SELECT current_setting('server_version_num')::int < 140000").fetchone()[0]
    assert held.lock_in_transaction is v13
    for _ in range(3):
        assert held.heartbeat()
        state, xmin = db.execute(
            "SELECT state, backend_xmin FROM pg_stat_activity WHERE pid = %s", (held.lock_pid,)
        ).fetchone()
        assert state == ("idle in transaction" if v13 else "idle")
        assert xmin is None  # (holding back no vacuum: no snapshot between its statements)
        seen = db.execute("SELECT heartbeat_pid FROM scrinalia.scheduler_state").fetchone()[0]
        assert seen == held.lock_pid  # committed: another session sees it
    db.execute("NOTIFY scrinalia_scheduler")
    assert held.notified(5.0)


def test_a_holder_whose_code_is_rolled_back_under_it_is_told_why(db_dsn, held):
    """The rollback takes the code (its heartbeat's function among it): the holder's next
    heartbeat says so in one line, for the daemon's exit 2, on 13 too, where the failed
    call leaves the lock session's transaction aborted before the schema is checked."""
    assert held.heartbeat()
    rollback(db_dsn, 1)
    with pytest.raises(SchemaMismatch, match="no scrinalia code installed"):
        held.heartbeat()
