"""SIGTERM/SIGINT on the real runner: stop claiming, give the handler --grace, then
report INTERRUPTED "runner shut down" (the retry policy applies at once), exit 0;
a second signal exits at once."""

from __future__ import annotations

import signal
import time

import pytest

from helpers import make_worker, run_row, scheduled_run
from scrinalia_workers.testkit.procs import start_runner

pytestmark = pytest.mark.slow


def _exit_code(p, timeout: float) -> int:
    try:
        return p.popen.wait(timeout)
    except Exception:
        p.kill()
        p.popen.wait()
        raise AssertionError(f"the runner did not exit within {timeout}s:\n" + "".join(p.raw[-20:])) from None


def test_sigterm_during_a_long_handler_interrupts_after_the_grace(db, db_dsn):
    make_worker(db, "hang")
    run_id = scheduled_run(db, "hang")
    p = start_runner(db_dsn, "demo_handlers", "--grace", "1.5", "--lease", "30")
    try:
        p.wait_event("claimed", run_id=run_id)
        t0 = time.monotonic()
        p.kill(signal.SIGTERM)
        p.wait_event("stopping", run_id=run_id)
        assert _exit_code(p, 15) == 0
        waited = time.monotonic() - t0
    finally:
        if p.popen.poll() is None:
            p.kill()
    assert 1.5 <= waited < 10, waited
    row = run_row(db, run_id)
    assert (row["status"], row["error"], row["error_fingerprint"]) == (
        "INTERRUPTED",
        "runner shut down",
        "runner-shutdown",
    )
    assert row["retry_pending"] is True and row["lease_token"] is None
    assert p.count("interrupted", run_id=run_id) == 1
    # no waiting for the lease: the scheduler's next create_retries() makes attempt 2
    retry = db.execute("SELECT run_id, retry_of, attempt FROM scrinalia.create_retries()").fetchone()
    assert retry[1:] == (run_id, 2)


def test_sigterm_with_a_short_handler_reports_it_normally(db, db_dsn, monkeypatch):
    monkeypatch.setenv("SCRINALIA_TEST_SLOW", "1.0")
    make_worker(db, "slow")
    run_id = scheduled_run(db, "slow")
    p = start_runner(db_dsn, "demo_handlers", "--grace", "20")
    try:
        p.wait_event("claimed", run_id=run_id)
        t0 = time.monotonic()
        p.kill(signal.SIGTERM)
        assert _exit_code(p, 15) == 0
        assert time.monotonic() - t0 < 10  # it left when the handler returned, not after the grace
    finally:
        if p.popen.poll() is None:
            p.kill()
    row = run_row(db, run_id)
    assert row["status"] == "SUCCEEDED" and row["error"] is None
    assert p.count("finished", run_id=run_id, status="SUCCEEDED") == 1


def test_a_second_signal_exits_at_once(db, db_dsn):
    make_worker(db, "hang")
    run_id = db.execute("SELECT run_id FROM scrinalia.enqueue('hang')").fetchone()[0]
    p = start_runner(db_dsn, "demo_handlers", "--grace", "60")
    try:
        p.wait_event("claimed", run_id=run_id)
        p.kill(signal.SIGTERM)
        p.wait_event("stopping", run_id=run_id)
        t0 = time.monotonic()
        p.kill(signal.SIGINT)
        code = _exit_code(p, 5)
        assert time.monotonic() - t0 < 3
    finally:
        if p.popen.poll() is None:
            p.kill()
    assert code == 128 + signal.SIGINT
    p.wait_event("exiting at once")
    # nothing was reported: the run is left to its lease (the reaper ends it)
    assert run_row(db, run_id)["status"] == "RUNNING"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_an_idle_runner_stops_promptly(db, db_dsn, sig):
    p = start_runner(db_dsn, "demo_handlers")
    try:
        p.wait_event("runner started")
        time.sleep(0.3)  # let it go idle (its poll is 5 s)
        t0 = time.monotonic()
        p.kill(sig)
        assert _exit_code(p, 10) == 0
        assert time.monotonic() - t0 < 2
    finally:
        if p.popen.poll() is None:
            p.kill()
    p.wait_event("stopped")
    assert not any("Traceback" in line for line in p.raw)


def test_no_claim_after_the_signal(db, db_dsn, monkeypatch):
    # a run queued while the handler finishes its grace is left for another runner
    monkeypatch.setenv("SCRINALIA_TEST_SLOW", "1.5")
    make_worker(db, "slow")
    make_worker(db, "ok")
    first = db.execute("SELECT run_id FROM scrinalia.enqueue('slow')").fetchone()[0]
    p = start_runner(db_dsn, "demo_handlers", "--grace", "20")
    try:
        p.wait_event("claimed", run_id=first)
        p.kill(signal.SIGTERM)
        p.wait_event("stopping", run_id=first)
        second = db.execute("SELECT run_id FROM scrinalia.enqueue('ok')").fetchone()[0]
        assert _exit_code(p, 15) == 0
    finally:
        if p.popen.poll() is None:
            p.kill()
    assert run_row(db, first)["status"] == "SUCCEEDED"
    assert run_row(db, second)["status"] == "QUEUED"


def test_threads_a_handler_leaves_behind_do_not_hold_the_exit(db, db_dsn, tmp_path, monkeypatch):
    (tmp_path / "leaky.py").write_text(
        "import threading, time\n"
        "def leak(run):\n"
        "    threading.Thread(target=time.sleep, args=(600,)).start()  # not a daemon\n"
        "HANDLERS = {'leak': leak}\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    make_worker(db, "leak")
    run_id = db.execute("SELECT run_id FROM scrinalia.enqueue('leak')").fetchone()[0]
    p = start_runner(db_dsn, "leaky")
    try:
        p.wait_event("finished", run_id=run_id, status="SUCCEEDED")
        p.kill(signal.SIGTERM)
        assert _exit_code(p, 10) == 0
    finally:
        if p.popen.poll() is None:
            p.kill()


def test_a_signal_is_noticed_at_once_while_a_handler_runs(db, db_dsn):
    # the next heartbeat is 10 s away (lease 30): "stopping" within 2 s means the
    # signal woke the main thread, wherever it landed (repeated: the race is narrow)
    make_worker(db, "hang")
    for _ in range(5):
        run_id = db.execute("SELECT run_id FROM scrinalia.enqueue('hang')").fetchone()[0]
        p = start_runner(db_dsn, "demo_handlers", "--grace", "0.2", "--lease", "30")
        try:
            p.wait_event("claimed", run_id=run_id)
            p.kill(signal.SIGTERM)
            p.wait_event("stopping", run_id=run_id, timeout=2)
            assert _exit_code(p, 10) == 0
        finally:
            if p.popen.poll() is None:
                p.kill()
        assert run_row(db, run_id)["status"] == "INTERRUPTED"
