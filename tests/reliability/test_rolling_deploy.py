"""Issue 13, rolling deploy with the real daemons: `migrate` (which replaces every function
and view in place) run again and again while two schedulers, four runners and a stream
of manual enqueues work, alternately installing this release's code and a variant whose
every ledger function has another body, so that each migrate replaces the code the
daemons call (the previous release's daemons: test_rolling_upgrade.py). No daemon and no client may see an error, no period may be
enqueued twice, no owed retry lost; the time clients wait during a migrate is printed."""

from __future__ import annotations

import statistics
import threading
import time

import psycopg
import pytest
from psycopg.types.json import Jsonb

from helpers import code_digest, sql_variant
from invariants import check_all
from scrinalia_workers import sqlfiles
from scrinalia_workers.admin import migrate as m
from scrinalia_workers.demo.load_handlers import DEMO_OPTIONS
from scrinalia_workers.testkit.waiting import wait_for

pytestmark = pytest.mark.slow

SCHEDULED = 30
MANUAL = 10
MIGRATES = 8
# events that mean a daemon met an error (a deploy must cause none of them)
TROUBLE = {
    "pass error",
    "lock lost",
    "database unavailable",
    "database error",
    "runner error",
    "heartbeat error",
    "report abandoned",
    "lease lost",
}


def test_migrate_while_the_daemons_and_clients_work(db, db_dsn, role_logins, procs, tmp_path, monkeypatch):
    db.execute(
        """INSERT INTO scrinalia.archive_workers (worker_name, options)
                  SELECT w, %s FROM unnest(%s::text[]) w""",
        (Jsonb(DEMO_OPTIONS), [f"s{i:02d}" for i in range(SCHEDULED)] + [f"m{i:02d}" for i in range(MANUAL)]),
    )
    db.execute(
        """INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone, request)
                  SELECT worker_name, '* * * * *', 'UTC', %s FROM scrinalia.archive_workers
                   WHERE worker_name LIKE 's%%'""",
        (Jsonb({"options": {"seconds": 0.01, "fail_rate": 0.2}}),),
    )
    scheds = [
        procs.scheduler(db_dsn, "--standby-retry", "0.5", "--max-sleep", "0.3", "--name", f"sched{i}") for i in (1, 2)
    ]
    runners = [
        procs.runner(db_dsn, "scrinalia_workers.demo.load_handlers", "--lease", "5", "--runner-id", f"r{i}")
        for i in range(4)
    ]
    stop = threading.Event()
    client_errors: list[str] = []
    latencies: list[tuple[float, float]] = []  # (start, seconds)
    migrating: list[tuple[float, float]] = []

    def clients():
        dsn = psycopg.conninfo.make_conninfo(db_dsn, user=role_logins["operator"])
        with psycopg.connect(dsn, autocommit=True) as c:
            i = 0
            while not stop.is_set():
                i += 1
                t0 = time.monotonic()
                try:
                    c.execute(
                        "SELECT run_id FROM scrinalia.enqueue(%s, %s)",
                        (f"m{i % MANUAL:02d}", Jsonb({"options": {"seconds": 0.01}})),
                    ).fetchone()
                    c.execute("SELECT count(*) FROM scrinalia.worker_agenda").fetchone()
                except psycopg.Error as e:
                    if e.sqlstate != "SW010":  # a busy slot is an answer, not an error
                        client_errors.append(f"[{e.sqlstate}] {e}")
                latencies.append((t0, time.monotonic() - t0))
                time.sleep(0.005)

    def make_due():
        # a few periods come due all the time (the clock is data), so the schedulers tick
        with psycopg.connect(db_dsn, autocommit=True) as c:
            k = 0
            while not stop.is_set():
                k += 1
                c.execute(
                    "UPDATE scrinalia.archive_worker_schedules SET next_run_at = now() WHERE worker_name IN (%s, %s)",
                    (f"s{(2 * k) % SCHEDULED:02d}", f"s{(2 * k + 1) % SCHEDULED:02d}"),
                )
                c.execute("NOTIFY scrinalia_scheduler")
                stop.wait(0.1)

    threads = [threading.Thread(target=clients), threading.Thread(target=make_due)]
    try:
        wait_for(lambda: any(s.count("lock acquired") for s in scheds), what="a scheduler holding the lock")
        for r in runners:
            r.wait_event("runner started")
        for t in threads:
            t.start()
        wait_for(
            lambda: (
                db.execute(
                    "SELECT count(*) FROM scrinalia.archive_worker_runs"
                    " WHERE status = 'SUCCEEDED' AND trigger = 'SCHEDULE'"
                ).fetchone()[0]
                >= 10
            ),
            timeout=30,
            what="scheduled runs flowing",
        )
        roots = [str(sql_variant(tmp_path)), str(sqlfiles.project_root())]
        for k in range(MIGRATES):
            monkeypatch.setenv("SCRINALIA_ROOT", roots[k % 2])
            code_before = code_digest(db)
            t0 = time.monotonic()
            assert m.migrate(db_dsn) == []
            migrating.append((t0, time.monotonic()))
            assert code_digest(db) != code_before, "each migrate must change the code the daemons call"
            time.sleep(0.3)
        stop.set()
        for t in threads:
            t.join(10)
    finally:
        stop.set()  # the client threads end with the test, whatever happened
    codes = procs.stop_all(runners + scheds, timeout=30)
    trouble = [
        (e.get("event"), e.get("reason"))
        for p in scheds + runners
        for e in p.events
        if e.get("event") in TROUBLE or e.get("level") == "error"
    ]
    assert trouble == [], trouble
    assert client_errors == [], client_errors[:5]
    assert codes == [0] * len(codes)
    assert check_all(db) == []
    # the schedulers really ticked and the runners really worked during the deploys
    first, last = migrating[0][0], migrating[-1][1]
    worked = db.execute(
        "SELECT count(*) FILTER (WHERE trigger = 'SCHEDULE'), count(*) FILTER (WHERE retry_of IS NOT NULL),"
        " count(*) FILTER (WHERE trigger = 'MANUAL') FROM scrinalia.archive_worker_runs"
    ).fetchone()
    assert worked[0] >= 20 and worked[2] >= 20, worked
    during = [d for t, d in latencies if any(a <= t <= b for a, b in migrating)]
    outside = [d for t, d in latencies if first <= t <= last and not any(a <= t <= b for a, b in migrating)]
    assert during, "no client call overlapped a migrate"
    print(
        f"\nRELIABILITY rolling deploy, real daemons: {MIGRATES} migrates "
        f"(median {statistics.median(b - a for a, b in migrating) * 1000:.0f} ms each); "
        f"runs: {worked[0]} scheduled ({worked[1]} retries), {worked[2]} manual; client calls overlapping a "
        f"migrate: {len(during)}, max {max(during) * 1000:.0f} ms (median {statistics.median(during) * 1000:.1f} ms); "
        f"outside: max {max(outside) * 1000:.0f} ms (median {statistics.median(outside) * 1000:.1f} ms); "
        "errors: 0"
    )
