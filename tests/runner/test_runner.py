"""The reference runner, in-process and as a real process, against a real PostgreSQL."""

from __future__ import annotations

import os
import signal
import threading
from datetime import timedelta

import pytest
from runner_fakes import RecordingWakeup

import demo_handlers
from helpers import make_worker, run_row, scheduled_run
from scrinalia_workers.logs import EventLog
from scrinalia_workers.runner import Runner
from scrinalia_workers.testkit.waiting import wait_for


@pytest.fixture
def quiet():
    return EventLog(stream=open(os.devnull, "w"))


def _enqueue(db, worker):
    return db.execute("SELECT run_id FROM scrinalia.enqueue(%s)", (worker,)).fetchone()[0]


def test_claims_and_reports_succeeded(db, db_dsn, quiet):
    make_worker(db, "ok")
    run_id = _enqueue(db, "ok")
    seen = []
    r = Runner(db_dsn, {"ok": lambda run: seen.append(run["run_id"])}, runner_id="t1", log=quiet)
    out = r.run_once()
    r.close()
    assert out.end == "SUCCEEDED" and seen == [run_id]
    row = run_row(db, run_id)
    assert row["status"] == "SUCCEEDED" and row["lease_owner"] == "t1"


def test_failure_reported_and_retry_left_to_the_scheduler(db, db_dsn, quiet):
    make_worker(db, "boom")
    run_id = scheduled_run(db, "boom")
    r = Runner(db_dsn, {"boom": demo_handlers.boom}, log=quiet)
    assert r.run_once().end == "FAILED"
    r.close()
    row = run_row(db, run_id)
    assert row["status"] == "FAILED"
    assert row["error"].startswith("RuntimeError: boom on attempt 1") and "demo_handlers.py" in row["error"]
    assert len(row["error_fingerprint"]) == 16
    # the runner created nothing: the retry comes from create_retries()
    assert db.execute("SELECT count(*) FROM scrinalia.archive_worker_runs").fetchone()[0] == 1
    retry = db.execute("SELECT run_id, retry_of, attempt FROM scrinalia.create_retries()").fetchone()
    assert retry[1:] == (run_id, 2)


def test_same_failure_same_fingerprint(db, db_dsn, quiet):
    make_worker(db, "boom")
    r = Runner(db_dsn, {"boom": demo_handlers.boom}, log=quiet)
    fps = []
    for _ in range(2):
        run_id = _enqueue(db, "boom")
        r.run_once()
        fps.append(run_row(db, run_id)["error_fingerprint"])
    r.close()
    assert fps[0] == fps[1]


def test_heartbeats_keep_a_slow_run(db, db_dsn, quiet, monkeypatch):
    monkeypatch.setenv("SCRINALIA_TEST_SLOW", "2.5")
    make_worker(db, "slow")
    run_id = _enqueue(db, "slow")
    r = Runner(db_dsn, {"slow": demo_handlers.slow}, lease=timedelta(seconds=1), log=quiet)
    assert r.run_once().end == "SUCCEEDED"
    r.close()
    row = run_row(db, run_id)
    assert row["status"] == "SUCCEEDED" and row["heartbeat_at"] > row["started_at"]


def test_lease_lost_mid_run_is_not_overwritten(db, db_dsn, quiet):
    make_worker(db, "w")
    run_id = _enqueue(db, "w")
    started, release = threading.Event(), threading.Event()

    def handler(run):
        started.set()
        release.wait(10)

    r = Runner(db_dsn, {"w": handler}, lease=timedelta(seconds=3), log=quiet)
    result = {}
    t = threading.Thread(target=lambda: result.update(run=r.run_once()))
    t.start()
    assert started.wait(10)
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET lease_expires_at = now() - interval '1 second' WHERE run_id = %s",
        (run_id,),
    )
    assert [x[0] for x in db.execute("SELECT run_id FROM scrinalia.reap_expired_leases()")] == [run_id]
    release.set()
    t.join(10)
    r.close()
    assert result["run"].end == "LEASE_LOST"
    row = run_row(db, run_id)
    assert row["status"] == "INTERRUPTED" and row["error_fingerprint"] == "lease-expired"


@pytest.mark.slow
def test_killed_runner_interrupted_then_retry_succeeds(db, db_dsn, procs):
    make_worker(db, "hang")
    run_id = scheduled_run(db, "hang")
    p = procs.runner(db_dsn, "demo_handlers", "--lease", "30", "--runner-id", "victim")
    p.wait_event("claimed", run_id=run_id)
    p.kill(signal.SIGKILL)
    p.popen.wait()
    db.execute("UPDATE scrinalia.archive_worker_runs SET lease_expires_at = now() WHERE run_id = %s", (run_id,))
    assert [x[0] for x in db.execute("SELECT run_id FROM scrinalia.reap_expired_leases()")] == [run_id]
    retry_id, attempt = db.execute("SELECT run_id, attempt FROM scrinalia.create_retries()").fetchone()
    assert attempt == 2
    db.execute("UPDATE scrinalia.archive_worker_runs SET not_before = now() WHERE run_id = %s", (retry_id,))
    r = Runner(db_dsn, {"hang": demo_handlers.ok}, runner_id="second", log=EventLog(stream=open(os.devnull, "w")))
    assert r.run_once().run_id == retry_id
    r.close()
    assert run_row(db, run_id)["status"] == "INTERRUPTED"
    row = run_row(db, retry_id)
    assert row["status"] == "SUCCEEDED" and row["lease_owner"] == "second" and row["retry_of"] == run_id


def _idling(r: Runner) -> threading.Thread:
    """r.run_forever() on a thread of its own, once it stands by for a NOTIFY."""
    t = threading.Thread(target=r.run_forever)
    t.start()
    wait_for(r.wakeup.standing_by.is_set, what="the runner standing by")
    return t


def test_notify_wakes_an_idle_runner(db, db_dsn, quiet):
    # its stand-by has no timeout here: only the enqueue's NOTIFY can end it
    make_worker(db, "ok")
    r = Runner(db_dsn, {"ok": demo_handlers.ok}, log=quiet, wakeup=RecordingWakeup(endless=True))
    t = _idling(r)
    try:
        run_id = _enqueue(db, "ok")
        wait_for(lambda: run_row(db, run_id)["status"] == "SUCCEEDED", what="the run woken for")
    finally:
        r.request_stop()
        t.join(30)
    assert not t.is_alive()
    assert r.wakeup.standbys[0] is True and r.claim_attempts >= 2


def test_a_stop_ends_the_idle_stand_by(db_dsn, quiet):
    # a signal rings the wake-up pipe (signal.set_wakeup_fd, as main() does); the
    # stand-by, without a timeout here, ends only because of it
    r = Runner(db_dsn, {"ok": demo_handlers.ok}, log=quiet, wakeup=RecordingWakeup(endless=True))
    t = _idling(r)
    previous = signal.signal(signal.SIGTERM, r.on_signal)
    previous_fd = signal.set_wakeup_fd(r.wakeup.write_fd, warn_on_full_buffer=False)
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        t.join(30)
        stopped = not t.is_alive()
    finally:
        signal.set_wakeup_fd(previous_fd)
        signal.signal(signal.SIGTERM, previous)
        r.request_stop()  # (a failing test leaves no thread behind)
        t.join(30)
    assert stopped and r.wakeup.standbys == [False] and r.claim_attempts == 1


@pytest.mark.slow
def test_bad_handlers_module_is_one_line_exit_2(db_dsn):
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-m", "scrinalia_workers.runner", "--dsn", db_dsn, "--handlers", "no_such_module_xyz"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 2 and "no_such_module_xyz" in r.stderr and "Traceback" not in r.stderr


def test_a_notify_backlog_costs_one_claim_attempt(db, db_dsn, quiet):
    # a busy runner does not listen: the NOTIFYs sent while its handler runs (one per
    # run of a backlog) are neither queued for it nor parsed; NOTIFYs that pile up while
    # it listens are drained at its next idle all at once, not one claim attempt each
    import psycopg

    make_worker(db, "noisy")
    _enqueue(db, "noisy")

    def notify_200():
        with psycopg.connect(db_dsn, autocommit=True) as c:
            for _ in range(200):
                c.execute("SELECT pg_notify('scrinalia_runs', 'noisy')")

    r = Runner(db_dsn, {"noisy": lambda run: notify_200()}, log=quiet, wakeup=RecordingWakeup())
    try:
        assert r.run_once().end == "SUCCEEDED"  # (a claim that brings work: not listening)
        conn = r.ledger.conn
        assert conn.execute("SELECT count(*) FROM pg_listening_channels()").fetchone()[0] == 0
        assert list(conn.notifies(timeout=0)) == []
        r.ledger.listen()
        notify_200()
        r.ledger.conn.execute("SELECT 1")  # whatever is still in flight lands in the backlog
        r._idle()  # returns without standing by: there was something to wake up for
        assert r.wakeup.standbys == []
        assert list(r.ledger.conn.notifies(timeout=0)) == []
    finally:
        r.close()


def test_a_report_whose_answer_was_lost_is_not_called_a_lost_lease(db, db_dsn):
    # finish_runs() committed, then the connection died before its answer arrived: the
    # retry answers "the run is SUCCEEDED", which is this runner's own report
    import io
    import json

    import psycopg

    make_worker(db, "ok")
    run_id = _enqueue(db, "ok")
    out = io.StringIO()
    r = Runner(db_dsn, {"ok": demo_handlers.ok}, log=EventLog(json_lines=True, stream=out))
    real_finish, calls = r.ledger._finish_runs, []

    def finish_then_drop(*args):
        rows = real_finish(*args)
        calls.append(1)
        if len(calls) == 1:
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return rows

    r.ledger._finish_runs = finish_then_drop  # type: ignore[method-assign]
    try:
        assert r.run_once().end == "SUCCEEDED"
    finally:
        r.close()
    events = [json.loads(line)["event"] for line in out.getvalue().splitlines()]
    assert "lease lost" not in events and events[-1] == "finished"
    assert run_row(db, run_id)["status"] == "SUCCEEDED"
