"""SIGTERM/SIGINT on the real runner: stop claiming, give the handler --grace, then
report INTERRUPTED "runner shut down" (the retry policy applies at once), exit 0;
a second signal exits at once.

How long the grace lasts, and that a stop ends an idle stand-by, are driven by a
fake clock and a wake-up without timeout (test_run_states.py, test_runner.py); here
the real process's signals, exit codes and log lines."""

from __future__ import annotations

import signal
import subprocess
import time

import pytest

from helpers import blocked_writing_its_log, make_worker, make_workers, run_row, scheduled_run
from scrinalia_workers.testkit.procs import runner_argv

pytestmark = pytest.mark.slow

# How long a test lets a signalled runner take to exit before it fails (a hang, not
# a measurement: the runners here have nothing left to wait for by then).
EXIT_WITHIN = 60


def test_sigterm_during_a_long_handler_interrupts_after_the_grace(db, db_dsn, procs):
    make_worker(db, "hang")
    run_id = scheduled_run(db, "hang")
    p = procs.runner(db_dsn, "demo_handlers", "--grace", "1.5", "--lease", "30")
    p.wait_event("claimed", run_id=run_id)
    p.kill(signal.SIGTERM)
    p.wait_event("stopping", run_id=run_id, grace=1.5)
    assert p.popen.wait(EXIT_WITHIN) == 0
    events = [e["event"] for e in p.events if e.get("run_id") == run_id]
    assert events == ["claimed", "stopping", "grace over", "interrupted"]
    row = run_row(db, run_id)
    assert (row["status"], row["error"], row["error_fingerprint"]) == (
        "INTERRUPTED",
        "runner shut down",
        "runner-shutdown",
    )
    assert row["retry_pending"] is True and row["lease_token"] is None
    # no waiting for the lease: the scheduler's next create_retries() makes attempt 2
    retry = db.execute("SELECT run_id, retry_of, attempt FROM scrinalia.create_retries()").fetchone()
    assert retry[1:] == (run_id, 2)


def test_sigterm_with_a_short_handler_reports_it_normally(db, db_dsn, procs, monkeypatch):
    monkeypatch.setenv("SCRINALIA_TEST_SLOW", "1.0")
    make_worker(db, "slow")
    run_id = scheduled_run(db, "slow")
    p = procs.runner(db_dsn, "demo_handlers", "--grace", "600")
    p.wait_event("claimed", run_id=run_id)
    p.kill(signal.SIGTERM)
    # it leaves when the handler returns: the grace (10 minutes) would outlast EXIT_WITHIN
    assert p.popen.wait(EXIT_WITHIN) == 0
    row = run_row(db, run_id)
    assert row["status"] == "SUCCEEDED" and row["error"] is None
    assert p.count("finished", run_id=run_id, status="SUCCEEDED") == 1
    assert p.count("grace over") == 0


def test_a_second_signal_exits_at_once(db, db_dsn, procs):
    make_worker(db, "hang")
    run_id = db.execute("SELECT run_id FROM scrinalia.enqueue('hang')").fetchone()[0]
    p = procs.runner(db_dsn, "demo_handlers", "--grace", "600")
    p.wait_event("claimed", run_id=run_id)
    p.kill(signal.SIGTERM)
    p.wait_event("stopping", run_id=run_id)
    p.kill(signal.SIGINT)
    assert p.popen.wait(EXIT_WITHIN) == 128 + signal.SIGINT  # the grace (10 minutes) was not waited out
    p.wait_event("exiting at once")
    assert p.count("grace over") == 0
    # nothing was reported: the run is left to its lease (the reaper ends it)
    assert run_row(db, run_id)["status"] == "RUNNING"


def test_a_second_signal_exits_while_the_log_pipe_is_full(db, db_dsn):
    # nobody reads the runner's log: the pipe fills and the main thread blocks in a log
    # write, holding the log's lock; the second signal must still end the process
    names = make_workers(db, 3000)
    db.execute("SELECT scrinalia.enqueue(name) FROM unnest(%s::text[]) AS name", (names,))
    p = subprocess.Popen(
        runner_argv(db_dsn, "every_worker_handlers"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + EXIT_WITHIN
        while not blocked_writing_its_log(p):
            assert p.poll() is None and time.monotonic() < deadline, "the runner never blocked on its log"
            time.sleep(0.01)
        p.send_signal(signal.SIGTERM)
        p.send_signal(signal.SIGINT)
        # both wait on the blocked write, and Python runs pending handlers in signal
        # order: the exit code is that of whichever was handled second
        assert p.wait(EXIT_WITHIN) in (128 + signal.SIGINT, 128 + signal.SIGTERM)
    finally:
        p.kill()
        p.wait()
        assert p.stderr is not None
        p.stderr.close()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_an_idle_runner_stops(db_dsn, procs, sig):
    p = procs.runner(db_dsn, "demo_handlers")
    p.wait_event("runner started")
    p.kill(sig)
    assert p.popen.wait(EXIT_WITHIN) == 0
    p.wait_event("stopped")
    assert not any("Traceback" in line for line in p.raw)


def test_no_claim_after_the_signal(db, db_dsn, procs, monkeypatch):
    # a run queued while the handler finishes its grace is left for another runner
    monkeypatch.setenv("SCRINALIA_TEST_SLOW", "1.5")
    make_worker(db, "slow")
    make_worker(db, "ok")
    first = db.execute("SELECT run_id FROM scrinalia.enqueue('slow')").fetchone()[0]
    p = procs.runner(db_dsn, "demo_handlers", "--grace", "20")
    p.wait_event("claimed", run_id=first)
    p.kill(signal.SIGTERM)
    p.wait_event("stopping", run_id=first)
    second = db.execute("SELECT run_id FROM scrinalia.enqueue('ok')").fetchone()[0]
    assert p.popen.wait(EXIT_WITHIN) == 0
    assert run_row(db, first)["status"] == "SUCCEEDED"
    assert run_row(db, second)["status"] == "QUEUED"


def test_threads_a_handler_leaves_behind_do_not_hold_the_exit(db, db_dsn, procs, tmp_path, monkeypatch):
    (tmp_path / "leaky.py").write_text(
        "import threading, time\n"
        "def leak(run):\n"
        "    threading.Thread(target=time.sleep, args=(600,)).start()  # not a daemon\n"
        "HANDLERS = {'leak': leak}\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    make_worker(db, "leak")
    run_id = db.execute("SELECT run_id FROM scrinalia.enqueue('leak')").fetchone()[0]
    p = procs.runner(db_dsn, "leaky")
    p.wait_event("finished", run_id=run_id, status="SUCCEEDED")
    p.kill(signal.SIGTERM)
    assert p.popen.wait(EXIT_WITHIN) == 0  # the leaked thread sleeps 10 minutes


def test_a_signal_is_noticed_while_a_handler_runs(db, db_dsn, procs):
    # lease one hour: the main thread's own next wake-ups, a heartbeat and the
    # handler's return, are 20 and 10 minutes away; "stopping" before EXIT_WITHIN
    # means the signal woke it, wherever it landed (repeated: the race is narrow)
    make_worker(db, "hang")
    for _ in range(5):
        run_id = db.execute("SELECT run_id FROM scrinalia.enqueue('hang')").fetchone()[0]
        p = procs.runner(db_dsn, "demo_handlers", "--grace", "0.2", "--lease", "3600")
        p.wait_event("claimed", run_id=run_id)
        p.kill(signal.SIGTERM)
        p.wait_event("stopping", run_id=run_id, timeout=EXIT_WITHIN)
        assert p.popen.wait(EXIT_WITHIN) == 0
        assert run_row(db, run_id)["status"] == "INTERRUPTED"
