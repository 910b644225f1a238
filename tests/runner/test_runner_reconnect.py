"""The real runner's connection is terminated from the server side (57P01, as an
admin or a failover does): idle or mid-run, it logs, reconnects, and goes on."""

from __future__ import annotations

import pytest

from helpers import make_worker, run_row
from scrinalia_workers.testkit.waiting import wait_for

pytestmark = pytest.mark.slow


def _backend(db, runner_id):
    row = db.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (f"scrinalia-runner {runner_id}",)
    ).fetchone()
    return row[0] if row else None


def _terminate(db, runner_id):
    pid = wait_for(lambda: _backend(db, runner_id), what="the runner's backend")
    assert db.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()[0]
    return pid


def test_killed_while_idle_it_reconnects_and_claims(db, db_dsn, procs):
    make_worker(db, "ok")
    p = procs.runner(db_dsn, "demo_handlers", "--runner-id", "idle-victim")
    p.wait_event("runner started")
    old = _terminate(db, "idle-victim")
    p.wait_event("database unavailable")
    wait_for(lambda: _backend(db, "idle-victim") not in (None, old), what="a new backend")
    run_id = db.execute("SELECT run_id FROM scrinalia.enqueue('ok')").fetchone()[0]
    p.wait_event("finished", run_id=run_id, status="SUCCEEDED")
    # (not necessarily the first new backend seen: after the error the runner asks on a
    # new connection whether the schema moved, then closes it and reconnects once more)
    assert _backend(db, "idle-victim") not in (None, old)
    assert p.count("database unavailable") == 1
    assert p.popen.poll() is None
    assert p.stop() == 0
    assert not any("Traceback" in line for line in p.raw)


def test_killed_while_a_handler_runs_the_lease_survives(db, db_dsn, monkeypatch, procs):
    monkeypatch.setenv("SCRINALIA_TEST_SLOW", "4")
    make_worker(db, "slow")
    make_worker(db, "ok")
    run_id = db.execute("SELECT run_id FROM scrinalia.enqueue('slow')").fetchone()[0]
    p = procs.runner(db_dsn, "demo_handlers", "--runner-id", "busy-victim", "--lease", "3")
    p.wait_event("claimed", run_id=run_id)
    _terminate(db, "busy-victim")
    p.wait_event("heartbeat error", run_id=run_id)
    p.wait_event("finished", run_id=run_id, status="SUCCEEDED", timeout=15)
    # and it goes on claiming
    nxt = db.execute("SELECT run_id FROM scrinalia.enqueue('ok')").fetchone()[0]
    p.wait_event("finished", run_id=nxt, status="SUCCEEDED")
    assert p.stop() == 0
    row = run_row(db, run_id)
    assert row["status"] == "SUCCEEDED" and row["heartbeat_at"] > row["started_at"]
    assert p.count("lease lost") == 0
    assert not any("Traceback" in line for line in p.raw)
