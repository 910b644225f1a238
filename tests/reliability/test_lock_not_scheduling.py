"""Only a scheduler holds the scheduler's lock. The ADR lets the runner's and the API's
(operator) logins run the scheduler, so the credential does not tell a scheduler: what
it does does. A login of those groups that takes the lock the documented way and
heartbeats, scheduling nothing, is ended once a due schedule has gone unhandled for
longer than SCHEDULER_STALE_AFTER while it held the lock, and health names it as not
scheduling meanwhile; and one that queues for the lock with a long wait never gets it
ahead of a standby scheduler, whose lock session keeps its place in the queue."""

from __future__ import annotations

import signal
import threading

import psycopg
import pytest

from helpers import YEARLY, make_worker, put_schedule
from scrinalia_workers.testkit.waiting import wait_for

pytestmark = pytest.mark.slow


def _as(dsn: str, login: str) -> str:
    return psycopg.conninfo.make_conninfo(dsn, user=login)


class FakeHolder(threading.Thread):
    """Takes the lock as `login` with take_scheduler_lock (waiting `wait`), vouching for
    an idle session W of its own, then heartbeats every 0.3 s, ticking nothing; until
    its session is ended or `stop` is set."""

    def __init__(self, dsn: str, wait: str, stop: threading.Event):
        super().__init__(daemon=True)
        self.work = psycopg.connect(dsn, autocommit=True, application_name="fake work")
        self.lock = psycopg.connect(dsn, autocommit=True, application_name="fake lock")
        self.lock_pid = self.lock.execute("SELECT pg_backend_pid()").fetchone()[0]
        self.work_pid = self.work.execute("SELECT pg_backend_pid()").fetchone()[0]
        self.wait, self.stop = wait, stop
        self.got: bool | None = None
        self.ended = False

    def run(self) -> None:
        try:
            self.got = self.lock.execute(
                "SELECT scrinalia.take_scheduler_lock('scrinalia-scheduler', %s::interval, %s)",
                (self.wait, self.work_pid),
            ).fetchone()[0]
            while self.got and not self.stop.wait(0.3):
                self.lock.execute("SELECT scrinalia.scheduler_heartbeat('scrinalia-scheduler', %s)", (self.work_pid,))
        except psycopg.errors.QueryCanceled:
            self.got = False
        except psycopg.OperationalError:
            self.ended = True

    def close(self) -> None:
        self.stop.set()
        self.join(timeout=5)
        self.work.close()
        self.lock.close()


@pytest.fixture
def overdue(db):
    make_worker(db)
    put_schedule(db, "ocr", YEARLY, "UTC")
    db.execute("UPDATE scrinalia.archive_worker_schedules SET next_run_at = now() - interval '1 hour'")
    db.execute("INSERT INTO scrinalia.settings (name, value) VALUES ('SCHEDULER_STALE_AFTER', '2 seconds')")


@pytest.mark.parametrize("group", ["runner", "operator"])
def test_a_holder_that_heartbeats_but_does_not_schedule_is_named_then_ended(
    db, db_dsn, role_logins, procs, overdue, group
):
    stop = threading.Event()
    fake = FakeHolder(_as(db_dsn, role_logins[group]), "1 hour", stop)
    fake.start()
    try:
        wait_for(lambda: fake.got, timeout=10, what="the fake holder on the lock")
        # health: not healthy, and says why: it holds, heartbeats, and does not schedule
        reason = wait_for(
            lambda: (
                (r := db.execute("SELECT reason FROM scrinalia.scheduler_health()").fetchone()[0])
                and "not scheduling" in r
                and r
            ),
            timeout=10,
            what="health naming the holder as not scheduling",
        )
        assert f"pid {fake.lock_pid}" in reason and "ocr" in reason, reason
        s = procs.scheduler(_as(db_dsn, role_logins["scheduler"]), "--name", "real")
        ev = s.wait_event("stale holder evicted", timeout=15)
        assert ev["holder_pid"] == fake.lock_pid and "does not schedule" in ev["reason"], ev
        s.wait_event("lock acquired", timeout=10)
        assert s.wait_event("enqueued", worker="ocr", timeout=10)
        wait_for(lambda: fake.ended, timeout=5, what="the fake's session ended")
        wait_for(  # its vouched work session went with it
            lambda: not db.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (fake.work_pid,)).fetchone(),
            timeout=5,
            what="the fake's work session ended",
        )
    finally:
        fake.close()


def test_a_real_scheduler_in_its_first_pass_is_not_called_not_scheduling(db, db_dsn, role_logins, procs, overdue):
    """A scheduler that takes over long-overdue schedules is neither named nor ended:
    its tenure is counted from its work session, opened once it holds the lock."""
    sched = _as(db_dsn, role_logins["scheduler"])
    # (passes, so heartbeats, well within the stale-after of 2 s)
    a = procs.scheduler(sched, "--name", "a", "--max-sleep", "0.5")
    b = procs.scheduler(sched, "--name", "b", "--max-sleep", "0.5", "--standby-retry", "0.2")
    first = wait_for(lambda: next((p for p in (a, b) if p.has("lock acquired")), None), timeout=15, what="one holder")
    first.wait_event("enqueued", worker="ocr")
    other = b if first is a else a
    other.wait_event("standby")
    healthy, reason = db.execute("SELECT healthy, reason FROM scrinalia.scheduler_health()").fetchone()
    assert healthy, reason
    assert a.count("stale holder evicted") + b.count("stale holder evicted") == 0


@pytest.mark.parametrize("group", ["runner", "operator"])
def test_a_login_queued_with_a_long_wait_never_gets_the_lock_ahead_of_a_standby(db, db_dsn, role_logins, procs, group):
    sched = _as(db_dsn, role_logins["scheduler"])
    a = procs.scheduler(sched, "--name", "a", "--standby-retry", "0.3")
    a.wait_event("lock acquired")
    b = procs.scheduler(sched, "--name", "b", "--standby-retry", "0.3")
    b.wait_event("standby")
    stop = threading.Event()
    fake = FakeHolder(_as(db_dsn, role_logins[group]), "30 seconds", stop)
    fake.start()
    try:
        wait_for(
            lambda: db.execute(
                "SELECT count(*) FROM pg_locks WHERE pid = %s AND locktype = 'advisory' AND NOT granted",
                (fake.lock_pid,),
            ).fetchone()[0],
            timeout=10,
            what="the login waiting in the lock's queue",
        )
        # the standby has looked at the holder since the login queued (a scheduler that
        # left the queue to look would be behind it now)
        wait_for(
            lambda: db.execute(
                "SELECT EXISTS (SELECT 1 FROM pg_stat_activity a, pg_locks l"
                " WHERE l.pid = %s AND NOT l.granted AND l.locktype = 'advisory'"
                " AND a.query LIKE '%%evict_lock_holder%%' AND a.query_start > l.waitstart)",
                (fake.lock_pid,),
            ).fetchone()[0],
            timeout=10,
            what="a look of the standby after the login queued",
        )
        a.kill(signal.SIGTERM)
        b.wait_event("lock acquired", timeout=15)
        holder = db.execute("SELECT holder_role FROM scrinalia.scheduler_status()").fetchone()[0]
        assert holder == role_logins["scheduler"]
        assert fake.got is None  # still waiting behind the scheduler, never granted
    finally:
        db.execute("SELECT pg_cancel_backend(%s)", (fake.lock_pid,))
        fake.close()
    assert fake.got is False
