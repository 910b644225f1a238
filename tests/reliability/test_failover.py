"""Failover: a primary dies hard and its streaming replica is promoted under the
real daemons (issue 13).

A primary and a replica (pg_basebackup -R) of the test's own; two real schedulers
and two real runners with one multi-host DSN (target_session_attrs=read-write).
Each of PERIODS schedules is armed on its own second, so a period comes due every
second for the whole scenario; their cron is yearly, so each schedule has exactly
one period inside the test and "each period once" is a plain count. Every
FAIL_EVERY-th worker's handler raises: its retry must be created once.

The scenario: the replica stops receiving WAL (its primary_conninfo is emptied:
replication lag, as in a network partition) for LAG seconds; the primary is
stopped with `pg_ctl stop -m immediate`; OUTAGE seconds later (a failover manager
detecting the loss) the replica is promoted. With
asynchronous replication the primary goes on committing during the lag and those
commits are lost; with a synchronous standby (synchronous_commit = remote_apply)
the primary's commits wait instead and nothing acknowledged is lost. Measured and
printed (pytest -s): the takeover time (asserted below TAKEOVER_BOUND), the acknowledged enqueues and finishes that
the new primary does not have, and how late the lost periods were enqueued again.
"""

from __future__ import annotations

import json
import os
import textwrap
import time
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg.rows import dict_row

from infra import multi_host_dsn, require_server_binaries
from invariants import check_all, settled_after
from scrinalia_workers.admin.migrate import migrate
from scrinalia_workers.testkit.cluster import LocalCluster, free_port
from scrinalia_workers.testkit.waiting import wait_for

pytestmark = pytest.mark.slow

PERIODS = 24  # one schedule per second, the first FIRST_AT s after seeding
FIRST_AT = 4
FAIL_EVERY = 6  # p06, p12, p18, p24 raise
LAG = 3.0  # seconds the replica receives nothing before the primary dies
OUTAGE = 2.0  # seconds with no writable node: a failover manager's detection time
FAILOVER_AFTER = 5  # successful runs before the lag starts
# s from promotion to a lock held on the new primary: after OUTAGE seconds of failed
# connections the daemons' reconnect backoff (doubling from 0.2 s) waits at most about
# as long again, then a standby retry; the takeover itself is one lock attempt
TAKEOVER_BOUND = 4.0
RETRY = "0.5"  # --standby-retry

HANDLERS = textwrap.dedent("""
    import time

    class Boom(RuntimeError):
        pass

    def work(run):
        time.sleep(0.3)
        if int(run["worker_name"][1:]) % FAIL_EVERY == 0:
            raise Boom("this worker always fails")

    HANDLERS = {"*": work}
""").replace("FAIL_EVERY", str(FAIL_EVERY))


def _utc(ts: str) -> datetime:
    return datetime.fromisoformat(ts)


def _seed(conn: psycopg.Connection) -> datetime:
    """PERIODS workers, p01..pNN, each armed on its own second after now(); returns the first."""
    first = conn.execute("SELECT date_trunc('second', now()) + %s * interval '1 second'", (FIRST_AT,)).fetchone()[0]
    conn.execute(
        "INSERT INTO scrinalia.archive_workers (worker_name) "
        "SELECT 'p' || lpad(g::text, 2, '0') FROM generate_series(1, %s) g",
        (PERIODS,),
    )
    conn.execute(
        """
        INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone, next_run_at)
        SELECT 'p' || lpad(g::text, 2, '0'), '0 0 1 1 *', 'UTC', %(first)s + (g - 1) * interval '1 second'
          FROM generate_series(1, %(n)s) g""",
        {"n": PERIODS, "first": first},
    )
    return first


def _streaming(primary_conn: psycopg.Connection) -> bool:
    return primary_conn.execute("SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'").fetchone()[0] == 1


def _runs(conn: psycopg.Connection) -> list[dict]:
    return (
        conn.cursor(row_factory=dict_row)
        .execute(
            "SELECT run_id, worker_name, attempt, trigger, status, scheduled_for, created_at, retry_of "
            "FROM scrinalia.archive_worker_runs ORDER BY run_id"
        )
        .fetchall()
    )


@pytest.fixture
def handlers_module(tmp_path, monkeypatch):
    (tmp_path / "failover_handlers.py").write_text(HANDLERS)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    return "failover_handlers"


@pytest.fixture
def pair():
    """A primary and, once the test asks for it, its streaming replica."""
    bin_dir = require_server_binaries()
    nodes: list[LocalCluster] = [LocalCluster(bin_dir).start()]
    try:
        yield nodes
    finally:
        for n in nodes:
            n.stop()


@pytest.mark.parametrize("replication", ["async", "sync"])
def test_failover_under_the_real_daemons(pair, handlers_module, replication, procs):
    primary = pair[0]
    migrate(primary.dsn(), create_groups=True)
    pconn = psycopg.connect(primary.dsn(), autocommit=True)
    replica = primary.start_replica()
    pair.append(replica)
    rconn = psycopg.connect(replica.dsn(), autocommit=True)
    wait_for(lambda: _streaming(pconn), timeout=15, what="the replica streaming")
    if replication == "sync":
        # after the base backup: the replica must not inherit a wait for a standby of its own
        pconn.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
        pconn.execute("ALTER SYSTEM SET synchronous_commit = 'remote_apply'")
        pconn.execute("SELECT pg_reload_conf()")
        wait_for(
            lambda: pconn.execute("SELECT sync_state FROM pg_stat_replication").fetchone() == ("sync",),
            timeout=10,
            what="a synchronous standby",
        )
    first = _seed(pconn)
    last = first + timedelta(seconds=PERIODS - 1)

    dsn = multi_host_dsn(primary, replica)
    scheds = [procs.scheduler(dsn, "--standby-retry", RETRY, "--max-sleep", "0.5", "--name", f"s{i}") for i in (1, 2)]
    runners = [procs.runner(dsn, handlers_module, "--lease", "3", "--runner-id", f"r{i}") for i in (1, 2)]
    wait_for(
        lambda: (
            pconn.execute("SELECT count(*) FROM scrinalia.archive_worker_runs WHERE status = 'SUCCEEDED'").fetchone()[0]
            >= FAILOVER_AFTER
        ),
        timeout=FIRST_AT + FAILOVER_AFTER + 15,
        what="the first runs done on the primary",
    )

    # replication lag: the replica stops receiving WAL, the primary goes on (or waits)
    rconn.execute("ALTER SYSTEM SET primary_conninfo = ''")
    rconn.execute("SELECT pg_reload_conf()")
    wait_for(
        lambda: rconn.execute("SELECT count(*) FROM pg_stat_wal_receiver").fetchone()[0] == 0,
        timeout=10,
        what="the replica's WAL receiver gone",
    )
    lag_started = datetime.now(UTC)
    time.sleep(LAG)  # the lag itself is the scenario: the primary works (or waits) meanwhile
    primary_lsn = pconn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
    killed = datetime.now(UTC)
    primary.kill()
    pconn.close()
    replica_lsn = rconn.execute("SELECT pg_last_wal_receive_lsn()").fetchone()[0]
    time.sleep(OUTAGE)  # no writable node: the daemons retry against a read-only replica
    exited = [(p.popen.args[2:4], "".join(p.raw[-5:])) for p in scheds + runners if p.popen.poll() is not None]
    assert not exited, f"a daemon exited during the outage: {exited}"
    promoting = datetime.now(UTC)  # the takeover counts from the promotion's start: the new
    replica.promote()  # primary may take writes, and the lock, before pg_ctl returns
    promoted = datetime.now(UTC)
    rconn.close()
    new_conn = psycopg.connect(replica.dsn(), autocommit=True)

    def lock_after_promotion():
        evs = [
            (_utc(e["ts"]), s)
            for s in scheds
            for e in list(s.events)
            if e.get("event") == "lock acquired" and _utc(e["ts"]) > killed
        ]
        return min(evs, key=lambda x: x[0]) if evs else None

    took, new_holder = wait_for(
        lock_after_promotion, timeout=TAKEOVER_BOUND + 5, what="a scheduler holding the lock on the new primary"
    )
    old_holder = next(
        s for s in scheds if any(e.get("event") == "lock acquired" and _utc(e["ts"]) < killed for e in list(s.events))
    )
    # the runners found the new primary by themselves (their connection is kept)
    wait_for(
        lambda: (
            new_conn.execute(
                "SELECT count(DISTINCT application_name) FROM pg_stat_activity "
                "WHERE application_name IN ('scrinalia-runner r1', 'scrinalia-runner r2')"
            ).fetchone()[0]
            == 2
        ),
        timeout=15,
        what="both runners connected to the new primary",
    )
    takeover = (took - promoting).total_seconds()
    assert 0 <= takeover < TAKEOVER_BOUND, f"the takeover took {takeover:.2f} s after the promotion began"

    # run on until every armed period has passed and been ticked, and the runners drained
    wait_for(
        lambda: settled_after(new_conn, last),
        timeout=PERIODS + FIRST_AT + 20,
        interval=0.2,
        what="all periods ticked and run",
    )

    # the daemons alone reap and retry: the holder heartbeats before each pass (reap,
    # retries, tick), so a pass that began after the last run ended has run its
    # create_retries() once a later heartbeat is written
    def heartbeat_after(instant):
        beat = new_conn.execute("SELECT heartbeat_at FROM scrinalia.scheduler_state").fetchone()[0]
        return beat if beat is not None and beat > instant else None

    last_end = new_conn.execute("SELECT max(finished_at) FROM scrinalia.archive_worker_runs").fetchone()[0]
    settled_at = wait_for(lambda: heartbeat_after(last_end), timeout=15, what="a scheduler pass after the last end")
    wait_for(lambda: heartbeat_after(settled_at), timeout=15, what="that pass done")
    sched_codes, runner_codes = procs.stop_all(scheds), procs.stop_all(runners)
    assert sched_codes == [0, 0] and runner_codes == [0, 0]
    problems = check_all(new_conn, settled_at=settled_at)
    assert problems == [], problems

    runs = _runs(new_conn)
    by_period: dict[tuple, list[dict]] = {}
    for r in runs:
        if r["trigger"] == "SCHEDULE" and r["attempt"] == 1:
            by_period.setdefault((r["worker_name"], r["scheduled_for"]), []).append(r)
    expected = {(f"p{g:02d}", first + timedelta(seconds=g - 1)) for g in range(1, PERIODS + 1)}
    # each period exactly once: none lost, none twice, nothing else enqueued
    assert set(by_period) == expected, sorted(set(by_period) ^ expected)
    assert all(len(v) == 1 for v in by_period.values())
    firsts = {k[0]: v[0] for k, v in by_period.items()}
    children = {r["retry_of"]: r for r in runs if r["retry_of"] is not None}
    for g in range(1, PERIODS + 1):
        r = firsts[f"p{g:02d}"]
        if g % FAIL_EVERY == 0:
            assert r["status"] == "FAILED" and r["run_id"] in children, r
        else:
            # done, or cut off by the failover (its lease expired on the new primary): retried once
            assert r["status"] == "SUCCEEDED" or (r["status"] == "INTERRUPTED" and r["run_id"] in children), r
    # the runners resumed: runs created on the new primary ran there
    after = [r for r in by_period.values() if r[0]["created_at"] > promoted]
    assert after and all(r[0]["status"] in ("SUCCEEDED", "FAILED") for r in after)

    # what the clients were told (the daemons log after each commit) against what survived
    acked_enqueues = {
        (e["worker"], _utc(e["scheduled_for"]), e["run_id"])
        for s in scheds
        for e in s.events
        if e.get("event") == "enqueued"
    }
    kept = {(r["worker_name"], r["scheduled_for"], r["run_id"]) for r in runs if r["attempt"] == 1}
    lost_enqueues = sorted(acked_enqueues - kept)
    acked_finishes = {(e["run_id"], e["status"]) for p in runners for e in p.events if e.get("event") == "finished"}
    by_id = {r["run_id"]: r for r in runs}
    lost_finishes = sorted(f for f in acked_finishes if f[0] not in by_id or by_id[f[0]]["status"] != f[1])
    # the old primary's last state, read from its data directory on a side port
    primary.port = free_port()
    primary.pg_ctl("start", "-w", "-t", "60", "-o", f"-p {primary.port}", "-l", str(primary.logfile))
    with psycopg.connect(primary.dsn(), autocommit=True) as old:
        old_runs = _runs(old)
    on_old_only = [
        r
        for r in old_runs
        if (r["worker_name"], r["scheduled_for"], r["run_id"], r["attempt"])
        not in {(x["worker_name"], x["scheduled_for"], x["run_id"], x["attempt"]) for x in runs}
    ]
    redone = [
        by_period[(r["worker_name"], r["scheduled_for"])][0]
        for r in on_old_only
        if r["attempt"] == 1 and r["trigger"] == "SCHEDULE"
    ]
    late = max(((r["created_at"] - r["scheduled_for"]).total_seconds() for r in redone), default=0.0)
    new_conn.close()

    report = {
        "replication": replication,
        "takeover_after_promotion_s": round(takeover, 2),
        "takeover_after_kill_s": round((took - killed).total_seconds(), 2),
        "taken_by": "the old holder" if new_holder is old_holder else "the standby",
        "promotion_s": round((promoted - killed).total_seconds(), 2),
        "lag_s": round((killed - lag_started).total_seconds(), 2),
        "wal_not_replicated_bytes": _lsn(primary_lsn) - _lsn(replica_lsn),
        "periods": len(by_period),
        "acked_enqueues_lost": len(lost_enqueues),
        "acked_finishes_lost": len(lost_finishes),
        "old_primary_rows_not_on_new": len(on_old_only),
        "periods_enqueued_again": len(redone),
        "max_lateness_of_those_s": round(late, 2),
        "max_lateness_of_any_period_s": round(
            max((v[0]["created_at"] - v[0]["scheduled_for"]).total_seconds() for v in by_period.values()), 2
        ),
        "periods_due_while_no_primary": sum(1 for (_, sf) in by_period if killed < sf <= promoted),
        "retries": len(children),
    }
    print("\nFAILOVER " + json.dumps(report))
    if replication == "sync":
        # a synchronous standby applied every commit a client was told about
        assert lost_enqueues == [] and lost_finishes == [], (lost_enqueues, lost_finishes)
    else:
        # asynchronous: what the primary committed during the lag is gone; each such
        # period was enqueued again, once, on the new primary (counted above)
        assert report["wal_not_replicated_bytes"] > 0
        assert lost_enqueues, "the lag lost no acknowledged enqueue: the scenario did not test anything"
        assert {(w, sf) for w, sf, _ in lost_enqueues} <= set(by_period)


def _lsn(text: str) -> int:
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)
