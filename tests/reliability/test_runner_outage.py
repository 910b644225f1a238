"""The real runner through a PostgreSQL outage (pg_ctl stop -m fast, then start):
mid-handler its heartbeats fail and it reconnects before the lease ends; at report
time it retries finish() with backoff until the server is back. No run is lost, none
reported twice, the process never exits."""

from __future__ import annotations

import psycopg
import pytest
from psycopg.types.json import Jsonb

from scrinalia_workers.admin.migrate import migrate
from scrinalia_workers.testkit.waiting import wait_for

pytestmark = pytest.mark.slow


def _status(dsn, run_id):
    with psycopg.connect(dsn, autocommit=True) as c:
        return c.execute(
            "SELECT status::text, heartbeat_at > started_at, lease_owner"
            " FROM scrinalia.archive_worker_runs WHERE run_id = %s",
            (run_id,),
        ).fetchone()


def test_runner_through_an_outage(own_cluster, procs):
    cluster = own_cluster
    dsn = cluster.dsn("postgres")
    migrate(dsn, create_groups=True)
    with psycopg.connect(dsn, autocommit=True) as db:
        for w in ("report", "beat", "after"):
            db.execute(
                "SELECT scrinalia.register_worker(%s, '{}', '{}', %s)", (w, Jsonb({"seconds": {"type": "number"}}))
            )
        enqueue = "SELECT run_id FROM scrinalia.enqueue(%s, %s)"
        report = db.execute(enqueue, ("report", Jsonb({"options": {"seconds": 2}}))).fetchone()[0]
    p = procs.runner(dsn, "scrinalia_workers.demo.load_handlers", "--runner-id", "outage", "--lease", "9")
    # 1. the server goes down while a short handler runs: the report waits for it
    p.wait_event("claimed", run_id=report)
    cluster.pg_ctl("stop", "-w", "-m", "fast")
    p.wait_event("database unavailable", runs=str(report), timeout=20)
    cluster.pg_ctl("start", "-w", "-t", "60", "-l", str(cluster.logfile))
    p.wait_event("finished", run_id=report, status="SUCCEEDED", timeout=30)
    assert _status(dsn, report)[0] == "SUCCEEDED"

    # 2. down while a long handler runs: heartbeats fail, then keep the lease
    with psycopg.connect(dsn, autocommit=True) as db:
        beat = db.execute(enqueue, ("beat", Jsonb({"options": {"seconds": 9}}))).fetchone()[0]
    p.wait_event("claimed", run_id=beat)
    cluster.pg_ctl("stop", "-w", "-m", "fast")
    p.wait_event("heartbeat error", run_id=beat, timeout=10)
    cluster.pg_ctl("start", "-w", "-t", "60", "-l", str(cluster.logfile))
    p.wait_event("finished", run_id=beat, status="SUCCEEDED", timeout=30)
    assert _status(dsn, beat)[:2] == ("SUCCEEDED", True)
    assert p.count("lease lost") == 0

    # 3. after both outages it still claims
    with psycopg.connect(dsn, autocommit=True) as db:
        after = db.execute(enqueue, ("after", Jsonb({"options": {"seconds": 0}}))).fetchone()[0]
    wait_for(lambda: _status(dsn, after)[0] == "SUCCEEDED", timeout=30, what="claimed after the outages")
    assert _status(dsn, after)[2] == "outage"
    assert p.popen.poll() is None
    assert p.stop() == 0
    assert not any("Traceback" in line for line in p.raw), "".join(p.raw[-20:])
    with psycopg.connect(dsn, autocommit=True) as db:
        assert (
            db.execute("SELECT count(*) FROM scrinalia.archive_worker_runs WHERE status <> 'SUCCEEDED'").fetchone()[0]
            == 0
        )
