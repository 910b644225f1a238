"""The scheduler daemon as a real process against a real PostgreSQL."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from helpers import YEARLY, blocked_writing_its_log, due_yearly, make_worker, make_workers, put_schedule, set_next_run
from scrinalia_workers.gateway import connection as swdb
from scrinalia_workers.sqlfiles import head
from scrinalia_workers.testkit.procs import scheduler_argv
from scrinalia_workers.testkit.waiting import wait_for


def _runs(db, worker):
    return db.execute(
        "SELECT run_id, scheduled_for FROM scrinalia.archive_worker_runs WHERE worker_name = %s ORDER BY run_id",
        (worker,),
    ).fetchall()


def test_old_schema_refused_with_exit_2(db, db_dsn):
    db.execute(
        "CREATE OR REPLACE FUNCTION scrinalia.schema_head() RETURNS text"
        " LANGUAGE sql AS $$ SELECT '0003_schedules_retries'::text $$"
    )
    r = subprocess.run(
        [sys.executable, "-m", "scrinalia_workers.scheduler", "--dsn", db_dsn],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 2
    assert "0003_schedules_retries" in r.stderr and "scrinalia-workers migrate" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        (["--max-sleep", "0"], "--max-sleep: 0 is out of range"),
        (["--log-level", "loud"], "invalid choice: 'loud'"),
    ],
)
def test_a_bad_argument_is_one_line_exit_2(args, fragment):
    r = subprocess.run(
        [sys.executable, "-m", "scrinalia_workers.scheduler", *args], capture_output=True, text=True, timeout=30
    )
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.splitlines() == [r.stderr.strip()] and r.stderr.startswith("scrinalia-scheduler: ")
    assert fragment in r.stderr, r.stderr


def test_no_schema_refused_with_exit_2(empty_db_dsn):
    r = subprocess.run(
        [sys.executable, "-m", "scrinalia_workers.scheduler", "--dsn", empty_db_dsn],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 2 and f"needs {head()}" in r.stderr and "Traceback" not in r.stderr


def _pass_before(p, event: str, **fields) -> int:
    """The number of the last pass the scheduler began before it logged that event."""
    ev = p.wait_event(event, **fields)
    passes = [e["n"] for e in p.events[: p.events.index(ev)] if e.get("event") == "pass"]
    return passes[-1]


def test_a_notify_wakes_the_sleeping_scheduler_for_a_due_schedule(db, db_dsn, procs):
    make_worker(db, "ocr")
    put_schedule(db, "ocr", YEARLY, "UTC")
    # its timed wake-ups an hour apart: only the NOTIFY can bring the next pass
    p = procs.scheduler(db_dsn, "--max-sleep", "3600", "--log-level", "debug")
    assert _pass_before(p, "armed", worker="ocr") == 1
    # the pass's last transaction, its alerts' check, committed: the pass is over
    wait_for(
        lambda: db.execute("SELECT alerts_checked_at IS NOT NULL FROM scrinalia.scheduler_chores").fetchone()[0],
        timeout=30,
    )
    # asleep first: a schedule due before the pass asked for its next instant would be
    # ticked by the prepared tick of that instant, without a pass
    wait_for(lambda: _asleep(db), what="the scheduler asleep after its first pass")
    set_next_run(db, "ocr", "2 minutes")
    db.execute("NOTIFY scrinalia_scheduler")
    assert _pass_before(p, "enqueued", worker="ocr") == 2
    assert _runs(db, "ocr")[0][0] == p.wait_event("enqueued", worker="ocr")["run_id"]


def test_one_lock_holder_and_takeover_after_kill(db, db_dsn, procs):
    a = procs.scheduler(db_dsn, "--standby-retry", "1", "--name", "a")
    a.wait_event("lock acquired")
    b = procs.scheduler(db_dsn, "--standby-retry", "1", "--name", "b")
    b.wait_event("standby")
    assert b.count("lock acquired") == 0
    assert db.execute("SELECT heartbeat_by FROM scrinalia.scheduler_status()").fetchone()[0] == "a"
    a.kill(signal.SIGKILL)
    assert b.wait_event("lock acquired")["name"] == "b"
    wait_for(
        lambda: db.execute("SELECT heartbeat_by FROM scrinalia.scheduler_status()").fetchone()[0] == "b",
        what="b's heartbeat",
    )
    st = db.execute("SELECT holder_application FROM scrinalia.scheduler_status()").fetchone()
    assert st[0] == "scrinalia-scheduler lock"


def _last_standby_attempt(db):
    """When the standby last looked at the holder (from its look session, while its lock
    session waits in the lock's queue)."""
    row = db.execute(
        "SELECT query_start FROM pg_stat_activity WHERE application_name = 'scrinalia-scheduler standby'"
        " AND (query LIKE '%%evict_lock_holder%%' OR query LIKE '%%scheduler_status()%%')"
    ).fetchone()
    return row and row[0]


def test_terminated_lock_connection_stops_ticking(db, db_dsn, procs):
    a = procs.scheduler(
        db_dsn, "--standby-retry", "1", "--name", "sched-a", "--max-sleep", "0.2", "--log-level", "debug"
    )
    a.wait_event("lock acquired")
    make_worker(db, "early")
    put_schedule(db, "early", "* * * * *", "UTC")
    a.wait_event("armed", worker="early")
    assert db.execute("SELECT last_tick_by FROM scrinalia.scheduler_state").fetchone()[0] == "sched-a"
    # another holder takes the lock the moment A's backend dies
    pid = db.execute("SELECT holder_pid FROM scrinalia.scheduler_status()").fetchone()[0]
    other = swdb.connect(db_dsn)
    try:
        mark = a.mark()
        db.execute("SELECT pg_terminate_backend(%s)", (pid,))
        wait_for(
            lambda: other.execute("SELECT pg_try_advisory_lock(scrinalia.scheduler_lock_key())").fetchone()[0],
            what="lock free",
        )
        lost = a.events.index(a.wait_event("lock lost", since=mark))
        make_worker(db, "ocr")
        put_schedule(db, "ocr", "* * * * *", "UTC")
        set_next_run(db, "ocr", "1 minute")
        db.execute("UPDATE scrinalia.scheduler_state SET last_tick_by = 'nobody'")
        a.wait_event("standby", since=lost)
        # two of A's attempts at the lock, a --standby-retry (five of its --max-sleep)
        # apart, while the other session holds it: A must not tick meanwhile
        first = wait_for(lambda: _last_standby_attempt(db), what="an attempt of A")
        wait_for(lambda: _last_standby_attempt(db) > first, what="A's next attempt")
        assert db.execute("SELECT last_tick_by FROM scrinalia.scheduler_state").fetchone()[0] == "nobody"
        assert _runs(db, "ocr") == []
        ticked = [e for e in a.events[lost:] if e["event"] in ("pass", "armed", "enqueued", "skipped")]
        assert ticked == []
    finally:
        other.close()
    since = a.mark()
    a.wait_event("lock acquired", since=since)
    a.wait_event("enqueued", worker="ocr")


def test_sigterm_exits_0_and_releases_lock(db, db_dsn, procs):
    a = procs.scheduler(db_dsn)
    a.wait_event("lock acquired")
    assert db.execute("SELECT lock_held FROM scrinalia.scheduler_status()").fetchone()[0]
    assert a.stop() == 0
    assert a.count("stopping") == 1
    assert not db.execute("SELECT lock_held FROM scrinalia.scheduler_status()").fetchone()[0]


def test_a_second_signal_exits_while_the_log_pipe_is_full(db, db_dsn):
    # nobody reads the scheduler's log: its decision lines fill the pipe and a write
    # blocks holding the log's lock; the second signal must still end the process
    due_yearly(db, make_workers(db, 3000))
    p = subprocess.Popen(scheduler_argv(db_dsn), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not blocked_writing_its_log(p):
            assert p.poll() is None and time.monotonic() < deadline, "the scheduler never blocked on its log"
            time.sleep(0.01)
        p.send_signal(signal.SIGTERM)
        p.send_signal(signal.SIGINT)
        # pending handlers run in signal order: the code is that of the one handled second
        assert p.wait(60) in (128 + signal.SIGINT, 128 + signal.SIGTERM)
    finally:
        p.kill()
        p.wait()
        assert p.stderr is not None
        p.stderr.close()


def _asleep(db) -> bool:
    """Whether the scheduler's work session has asked for the next due instant, the
    last statement of a pass before the wait."""
    return db.execute(
        "SELECT EXISTS (SELECT FROM pg_stat_activity WHERE application_name = 'scrinalia-scheduler'"
        " AND state = 'idle' AND query LIKE '%%next_wakeup()%%')"
    ).fetchone()[0]


def test_put_schedule_from_sql_armed_by_notify(db, db_dsn, procs):
    make_worker(db, "ocr")
    # nothing to do, its timed wake-ups an hour apart: only put_schedule's NOTIFY can
    # bring a second pass
    a = procs.scheduler(db_dsn, "--max-sleep", "3600", "--log-level", "debug")
    a.wait_event("pass")
    wait_for(lambda: _asleep(db), what="the scheduler asleep after its first pass")
    put_schedule(db, "ocr", "0 2 * * *", "Europe/Berlin")
    assert _pass_before(a, "armed", worker="ocr") == 2
    assert db.execute("SELECT next_run_at FROM scrinalia.archive_worker_schedules").fetchone()[0] is not None


def test_unevaluable_zone_does_not_block_others(db, db_dsn, procs):
    make_worker(db, "ocr")
    make_worker(db, "bad")
    put_schedule(db, "ocr", "* * * * *", "UTC")
    put_schedule(db, "bad", "* * * * *", "UTC")
    # a zone PostgreSQL knows but zoneinfo does not (as after a tzdata skew)
    db.execute("ALTER TABLE scrinalia.archive_worker_schedules DISABLE TRIGGER ALL")
    db.execute("UPDATE scrinalia.archive_worker_schedules SET timezone = 'Mars/Olympus' WHERE worker_name = 'bad'")
    a = procs.scheduler(db_dsn)
    a.wait_event("armed", worker="ocr")
    err = a.wait_event("schedule set aside", worker="bad")
    assert "Mars/Olympus" in err["reason"]
    row = db.execute(
        "SELECT arm_error, arm_retry_at > now() FROM scrinalia.worker_agenda WHERE worker_name = 'bad'"
    ).fetchone()
    assert "Mars/Olympus" in row[0] and row[1]


def test_restart_reconnects_and_never_enqueues_twice(own_cluster, procs):
    import psycopg

    from scrinalia_workers.admin.migrate import migrate

    dsn = own_cluster.dsn("postgres")
    migrate(dsn, create_groups=True)
    with psycopg.connect(dsn, autocommit=True) as db:
        make_worker(db, "ocr")
        put_schedule(db, "ocr", "* * * * *", "UTC")
        set_next_run(db, "ocr", "1 minute")
    a = procs.scheduler(dsn, "--standby-retry", "0.5")
    a.wait_event("enqueued", worker="ocr")
    since = a.mark()
    own_cluster.restart()
    a.wait_event("lock acquired", timeout=15, since=since)
    with psycopg.connect(dsn, autocommit=True) as db:
        db.execute("UPDATE scrinalia.archive_worker_runs SET status = 'SUCCEEDED', finished_at = now()")
        set_next_run(db, "ocr", "30 seconds")
        db.execute("NOTIFY scrinalia_scheduler")
        a.wait_event("enqueued", since=since, worker="ocr")
        periods = [r[1] for r in _runs(db, "ocr")]
        assert len(periods) == len(set(periods)) == 2
    assert a.stop() == 0


def test_runs_as_the_least_privileged_scheduler_role(db, db_dsn, role_logins, procs):
    import psycopg

    make_worker(db, "ocr")
    put_schedule(db, "ocr", "* * * * *", "UTC")
    set_next_run(db, "ocr", "1 minute")
    dsn = psycopg.conninfo.make_conninfo(db_dsn, user=role_logins["scheduler"])
    a = procs.scheduler(dsn)
    a.wait_event("lock acquired")
    a.wait_event("enqueued", worker="ocr")
    assert a.stop() == 0


def test_the_lock_connection_asks_the_server_for_keepalives_too(db_dsn):
    from scrinalia_workers.gateway import connection as dbmod

    with dbmod.connect(db_dsn, server_keepalives=True) as conn:
        got = dict(
            conn.execute(
                "SELECT name, setting FROM pg_settings WHERE name IN "
                "('tcp_keepalives_idle', 'tcp_keepalives_interval', 'tcp_keepalives_count', 'tcp_user_timeout')"
            ).fetchall()
        )
    assert got == {
        "tcp_keepalives_idle": "5",
        "tcp_keepalives_interval": "2",
        "tcp_keepalives_count": "3",
        "tcp_user_timeout": "10000",
    }
