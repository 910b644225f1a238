"""The real runner through a PostgreSQL outage (pg_ctl stop -m fast, then start):
mid-handler its heartbeats fail and it reconnects before the lease ends; at report
time it retries finish() with backoff until the server is back. No run is lost, none
reported twice, the process never exits."""

from __future__ import annotations

import signal
from datetime import UTC, datetime, timedelta

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


def test_an_outage_shorter_than_the_lease_costs_no_run_that_succeeded(own_cluster, procs):
    """The lease runs out while the server is down (the first heartbeat could not be
    sent) and the handler succeeds during the outage: the reaper's first pass after
    the restart leaves the run alone and the runner's report lands. SUCCEEDED once,
    no retry, no second run."""
    cluster = own_cluster
    dsn = cluster.dsn("postgres")
    migrate(dsn, create_groups=True)
    lease = 9.0
    with psycopg.connect(dsn, autocommit=True) as db:
        db.execute(
            "SELECT scrinalia.register_worker('slow', '{}', '{}', %s)", (Jsonb({"seconds": {"type": "number"}}),)
        )
    sched = procs.scheduler(dsn, "--max-sleep", "0.2", "--standby-retry", "0.2")
    sched.wait_event("lock acquired", timeout=20)
    p = procs.runner(dsn, "scrinalia_workers.demo.load_handlers", "--runner-id", "short-outage", "--lease", str(lease))
    with psycopg.connect(dsn, autocommit=True) as db:
        run = db.execute("SELECT run_id FROM scrinalia.enqueue('slow', %s)", (Jsonb({"options": {"seconds": 5}}),))
        run_id = run.fetchone()[0]
    p.wait_event("claimed", run_id=run_id)
    with psycopg.connect(dsn, autocommit=True) as db:
        started, expires = db.execute(
            "SELECT started_at, lease_expires_at FROM scrinalia.archive_worker_runs WHERE run_id = %s", (run_id,)
        ).fetchone()
    # down just before the first heartbeat (lease/3 after the claim)
    wait_for(lambda: datetime.now(UTC) >= started + timedelta(seconds=lease / 3 - 0.5), timeout=10, what="t-0.5")
    cluster.pg_ctl("stop", "-w", "-m", "fast")
    # back just after the lease ran out: the outage is shorter than the lease
    wait_for(lambda: datetime.now(UTC) >= expires + timedelta(seconds=0.1), timeout=20, what="the lease ran out")
    cluster.pg_ctl("start", "-w", "-t", "60", "-l", str(cluster.logfile))
    with psycopg.connect(dsn, autocommit=True) as db:
        up, expired = db.execute(
            "SELECT pg_postmaster_start_time(), lease_expires_at FROM scrinalia.archive_worker_runs WHERE run_id = %s",
            (run_id,),
        ).fetchone()
        assert expired < up and up - started < timedelta(seconds=2 * lease)
        # the first pass after the restart, before the runner is back, reaps nothing
        assert db.execute("SELECT count(*) FROM scrinalia.reap_expired_leases()").fetchone()[0] == 0
    p.wait_event("finished", run_id=run_id, status="SUCCEEDED", timeout=30)
    with psycopg.connect(dsn, autocommit=True) as db:
        rows = db.execute("SELECT status::text, attempt FROM scrinalia.archive_worker_runs").fetchall()
    assert rows == [("SUCCEEDED", 1)]
    assert p.count("lease lost") == 0 and sched.count("lease reaped") == 0
    assert p.stop() == 0 and sched.stop() == 0


def _outage_setup(cluster, procs, lease: float, seconds: float):
    """A migrated cluster, a scheduler reaping every 0.2 s, a runner, and one run of a
    handler that sleeps `seconds`, claimed: (runner, scheduler, run_id, started_at)."""
    dsn = cluster.dsn("postgres")
    migrate(dsn, create_groups=True)
    with psycopg.connect(dsn, autocommit=True) as db:
        db.execute(
            "SELECT scrinalia.register_worker('slow', '{}', '{}', %s)", (Jsonb({"seconds": {"type": "number"}}),)
        )
    sched = procs.scheduler(dsn, "--max-sleep", "0.2", "--standby-retry", "0.2")
    sched.wait_event("lock acquired", timeout=20)
    p = procs.runner(dsn, "scrinalia_workers.demo.load_handlers", "--runner-id", "back-late", "--lease", str(lease))
    with psycopg.connect(dsn, autocommit=True) as db:
        run = db.execute(
            "SELECT run_id FROM scrinalia.enqueue('slow', %s)", (Jsonb({"options": {"seconds": seconds}}),)
        )
        run_id = run.fetchone()[0]
    p.wait_event("claimed", run_id=run_id)
    with psycopg.connect(dsn, autocommit=True) as db:
        started = db.execute(
            "SELECT started_at FROM scrinalia.archive_worker_runs WHERE run_id = %s", (run_id,)
        ).fetchone()[0]
    return p, sched, run_id, started


def _lease(dsn: str, run_id: int):
    with psycopg.connect(dsn, autocommit=True) as db:
        return db.execute(
            "SELECT heartbeat_at, lease_expires_at FROM scrinalia.archive_worker_runs WHERE run_id = %s", (run_id,)
        ).fetchone()


def _ran_once(dsn: str, p, sched, run_id: int) -> None:
    p.wait_event("finished", run_id=run_id, status="SUCCEEDED", timeout=30)
    with psycopg.connect(dsn, autocommit=True) as db:
        rows = db.execute("SELECT status::text, attempt FROM scrinalia.archive_worker_runs").fetchall()
    assert rows == [("SUCCEEDED", 1)]
    assert p.count("lease lost") == 0 and sched.count("lease reaped") == 0
    assert p.stop() == 0 and sched.stop() == 0


@pytest.mark.parametrize("phase", ["just-before-a-heartbeat", "just-after-a-heartbeat"])
def test_a_lease_running_out_after_the_restart_waits_for_the_runner(own_cluster, procs, phase):
    """The server is down a second, at either phase of the heartbeat, and the lease runs
    out after it is back while the runner has not reconnected yet (frozen across the
    outage and the expiry: a backoff as long as it likes). The reaper leaves the run
    alone; the runner, resumed, heartbeats or reports, and the run is SUCCEEDED once."""
    cluster, lease = own_cluster, 6.0
    dsn = cluster.dsn("postgres")
    p, sched, run_id, started = _outage_setup(cluster, procs, lease, seconds=lease / 3 + 2)
    if phase == "just-before-a-heartbeat":
        at = started + timedelta(seconds=lease / 3 - 0.4)
    else:
        wait_for(lambda: _lease(dsn, run_id)[0] > started, timeout=10, what="the first heartbeat")
        at = _lease(dsn, run_id)[0] + timedelta(seconds=0.3)
    wait_for(lambda: datetime.now(UTC) >= at, timeout=10, what="the phase")
    p.kill(signal.SIGSTOP)
    renewed, expires = _lease(dsn, run_id)
    cluster.pg_ctl("stop", "-w", "-m", "fast")
    cluster.pg_ctl("start", "-w", "-t", "60", "-l", str(cluster.logfile))
    with psycopg.connect(dsn, autocommit=True) as db:
        up = db.execute("SELECT pg_postmaster_start_time()").fetchone()[0]
        assert renewed < up < expires, "the lease must run out after the restart"
        wait_for(lambda: datetime.now(UTC) >= expires + timedelta(seconds=0.3), timeout=20, what="the lease ran out")
        # a pass after the expiry, the runner still away, reaps nothing
        assert db.execute("SELECT count(*) FROM scrinalia.reap_expired_leases()").fetchone()[0] == 0
        assert db.execute("SELECT now() < pg_postmaster_start_time() + %s", (timedelta(seconds=lease),)).fetchone()[0]
    p.kill(signal.SIGCONT)
    _ran_once(dsn, p, sched, run_id)


def test_the_issues_outage_with_the_runners_real_backoff(own_cluster, procs):
    """Down just before the first heartbeat, back a moment before the lease runs out,
    the handler succeeding meanwhile: the runner reports after its own backoff (up to
    about 2.5 s after the restart), later than the reaper's next pass."""
    cluster, lease = own_cluster, 9.0
    dsn = cluster.dsn("postgres")
    p, sched, run_id, started = _outage_setup(cluster, procs, lease, seconds=lease / 3 + 1)
    wait_for(lambda: datetime.now(UTC) >= started + timedelta(seconds=lease / 3 - 0.4), timeout=10, what="the phase")
    expires = _lease(dsn, run_id)[1]
    cluster.pg_ctl("stop", "-w", "-m", "fast")
    p.wait_event("database unavailable", runs=str(run_id), timeout=20)  # the report waits with backoff
    wait_for(lambda: datetime.now(UTC) >= expires - timedelta(seconds=1), timeout=20, what="a second before expiry")
    cluster.pg_ctl("start", "-w", "-t", "60", "-l", str(cluster.logfile))
    with psycopg.connect(dsn, autocommit=True) as db:
        assert db.execute("SELECT pg_postmaster_start_time()").fetchone()[0] < expires
    _ran_once(dsn, p, sched, run_id)
