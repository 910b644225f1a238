"""The real scheduler and runner: a runner stopped (SIGTERM) during a long scheduled
run reports it INTERRUPTED "runner shut down", and the scheduler, woken by the
report's NOTIFY, creates attempt 2 at once, with no lease to wait for; another runner
then does it."""

from __future__ import annotations

import signal

import pytest

from helpers import make_worker, put_schedule, run_row
from scrinalia_workers.testkit.waiting import wait_for

pytestmark = pytest.mark.slow


def test_a_stopped_runner_hands_its_run_to_the_retry_policy(db, db_dsn, procs):
    make_worker(db, "hang")
    put_schedule(db, "hang", "* * * * *", "UTC")
    sched = procs.scheduler(db_dsn, "--standby-retry", "0.5")
    runner = procs.runner(db_dsn, "demo_handlers", "--runner-id", "stopped", "--grace", "1", "--lease", "60")
    wait_for(
        lambda: db.execute(
            "SELECT next_run_at IS NOT NULL FROM scrinalia.archive_worker_schedules WHERE worker_name = 'hang'"
        ).fetchone()[0],
        what="the schedule armed",
    )
    db.execute("UPDATE scrinalia.archive_worker_schedules SET next_run_at = now() - interval '1 second'")
    db.execute("SELECT pg_notify('scrinalia_scheduler', 'test')")
    claimed = runner.wait_event("claimed", worker="hang", timeout=20)
    run_id = claimed["run_id"]
    runner.kill(signal.SIGTERM)
    assert runner.popen.wait(60) == 0
    row = run_row(db, run_id)
    assert (row["status"], row["error"]) == ("INTERRUPTED", "runner shut down")
    retry = sched.wait_event("retry created", retry_of=run_id, timeout=15)
    assert retry["attempt"] == 2
    # the lease (60 s) was never waited for: the retry exists while it would still run
    assert db.execute("SELECT now() < %s::timestamptz + interval '60 seconds'", (row["started_at"],)).fetchone()[0]
    assert sched.count("lease reaped") == 0
    # its backoff passes (moved, not waited) and another runner does attempt 2
    db.execute("UPDATE scrinalia.archive_worker_runs SET not_before = now() WHERE run_id = %s", (retry["run_id"],))
    other = procs.runner(db_dsn, "demo_handlers", "--runner-id", "other", "--grace", "1")
    other.wait_event("claimed", run_id=retry["run_id"], timeout=15)
    assert run_row(db, retry["run_id"])["lease_owner"] == "other"
