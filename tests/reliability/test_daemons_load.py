"""The real daemons under load, through a PostgreSQL restart.

Two real schedulers (one stands by) and eight real reference runners on a cluster of
this test's own: 2,000 schedules every minute, 10 % of the runs failing, the server
restarted (pg_ctl restart -m fast) while they work. At the end: no period twice,
never two live runs for a worker (sampled throughout), every failed attempt 1 or 2
retried once, and for the first on-time minute boundary every worker was either
enqueued or skipped for it: nothing lost. RELIABILITY_DAEMON_SCHEDULES scales it.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

import psycopg
from psycopg.types.json import Jsonb

from invariants import busy_slots, check_all
from scrinalia_workers.admin.migrate import migrate
from scrinalia_workers.demo.load_handlers import DEMO_OPTIONS
from scrinalia_workers.testkit.waiting import wait_for

SCHEDULES = int(os.environ.get("RELIABILITY_DAEMON_SCHEDULES", "2000"))
RUNNERS = 8


def _seed(db: psycopg.Connection) -> None:
    db.execute(
        """
        INSERT INTO scrinalia.archive_workers (worker_name, options)
        SELECT 'load' || lpad(g::text, 5, '0'), %s FROM generate_series(1, %s) g""",
        (Jsonb(DEMO_OPTIONS), SCHEDULES),
    )
    # armed on this minute's period, just passed: the first tick is a catch-up of all
    db.execute(
        """
        INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone, request, next_run_at)
        SELECT worker_name, '* * * * *', 'UTC', %s, date_trunc('minute', now())
          FROM scrinalia.archive_workers""",
        (Jsonb({"options": {"seconds": 0.002, "fail_rate": 0.1}}),),
    )


def test_real_daemons_under_load_through_a_restart(own_cluster, procs):
    cluster = own_cluster
    dsn = cluster.dsn("postgres")
    migrate(dsn, create_groups=True)
    db = psycopg.connect(dsn, autocommit=True)
    _seed(db)
    seeded = db.execute("SELECT max(next_run_at) FROM scrinalia.archive_worker_schedules").fetchone()[0]
    schedulers = [procs.scheduler(dsn, "--standby-retry", "0.5", "--name", f"s{i}") for i in (1, 2)]
    runners = [
        procs.runner(dsn, "scrinalia_workers.demo.load_handlers", "--lease", "5", "--runner-id", f"r{i}")
        for i in range(RUNNERS)
    ]
    wait_for(
        lambda: db.execute(
            "SELECT count(*) = 0 FROM scrinalia.archive_worker_schedules WHERE next_run_at <= %s", (seeded,)
        ).fetchone()[0],
        timeout=60,
        what="the catch-up ticked",
    )
    # The first on-time boundary is the minute after the last catch-up: a schedule
    # whose catch-up came before a minute that passed meanwhile is armed for that
    # minute and then for this one; one ticked after it skipped to this one.
    catch_ups, last_catch_up = db.execute(
        "SELECT count(*), max(created_at) FROM scrinalia.archive_worker_runs WHERE scheduled_for = %s", (seeded,)
    ).fetchone()
    assert catch_ups == SCHEDULES  # one catch-up each, not a replay
    boundary = last_catch_up.replace(second=0, microsecond=0) + timedelta(minutes=1)
    wait_for(
        lambda: (
            db.execute("SELECT count(*) FROM scrinalia.archive_worker_runs WHERE status = 'SUCCEEDED'").fetchone()[0]
            > SCHEDULES // 4
        ),
        timeout=60,
        what="a quarter of the catch-up done",
    )
    cluster.restart()
    db = psycopg.connect(dsn, autocommit=True)

    # run until the first on-time boundary has been ticked and worked
    def past_the_boundary() -> bool:
        assert busy_slots(db) == []
        now = db.execute("SELECT now()").fetchone()[0]
        settled = db.execute(
            "SELECT count(*) = 0 FROM scrinalia.archive_worker_schedules WHERE next_run_at <= %s", (boundary,)
        ).fetchone()[0]
        return now > boundary + timedelta(seconds=5) and settled

    wait_for(past_the_boundary, timeout=120, interval=0.5, what="the daemons past the boundary")
    assert procs.stop_all(runners, timeout=30) == [0] * len(runners)
    assert procs.stop_all(schedulers, timeout=30) == [0] * len(schedulers)

    # the schedulers came back after the restart: a lock was acquired again
    assert sum(s.count("lock acquired") for s in schedulers) >= 2
    db.execute("SELECT count(*) FROM scrinalia.reap_expired_leases()")
    db.execute("SELECT count(*) FROM scrinalia.create_retries()")
    problems = check_all(db, settled_at=db.execute("SELECT now()").fetchone()[0])
    assert problems == [], problems[:20]

    enqueued = {
        w
        for (w,) in db.execute(
            "SELECT worker_name FROM scrinalia.archive_worker_runs WHERE attempt = 1 AND scheduled_for = %s",
            (boundary,),
        )
    }
    skipped = {
        ev["worker"]
        for s in schedulers
        for ev in s.events
        if ev.get("event") == "skipped"
        and ev.get("scheduled_for")
        and datetime.fromisoformat(ev["scheduled_for"]) == boundary
    }
    assert len(enqueued) + len(skipped) == SCHEDULES and not (enqueued & skipped), (
        f"{SCHEDULES - len(enqueued | skipped)} workers neither enqueued nor skipped for {boundary}"
    )
    failed = db.execute("SELECT count(*) FROM scrinalia.archive_worker_runs WHERE status = 'FAILED'").fetchone()[0]
    assert failed > 0  # the failures really were injected
    db.close()
