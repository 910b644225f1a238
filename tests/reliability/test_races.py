"""Scenario D, database side: racing schedulers, a holder killed between the due
query and the tick, the lock connection terminated, PostgreSQL restarted mid-tick.

These drive the SQL contract the scheduler daemon relies on with real concurrent
connections (threads, one connection each), so they hold whatever the daemon's
Python does: the row locks, the period index and the transaction are the guarantee.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import psycopg
import pytest

from helpers import make_workers
from invariants import Decision, busy_slots, check_all, double_periods, lost_periods
from scrinalia_workers import cron
from scrinalia_workers.admin.migrate import migrate
from scrinalia_workers.testkit.cluster import start_cluster
from scrinalia_workers.testkit.waiting import wait_for

N_WORKERS = 300
ROUNDS = 12


def one_tick(conn: psycopg.Connection, name: str) -> list[Decision]:
    """What the daemon does per tick: due, next occurrences after the txn's now(), tick."""
    with conn.transaction():
        due = conn.execute("SELECT worker_name, cron, timezone, db_now FROM scrinalia.due_schedules()").fetchall()
        if not due:
            return []
        now = due[0][3]
        nexts = cron.next_occurrences([(d[1], d[2]) for d in due], now)
        rows = conn.execute(
            "SELECT worker_name, decision, scheduled_for FROM scrinalia.tick(%s::text[], %s::timestamptz[], %s)",
            ([d[0] for d in due], nexts, name),
        ).fetchall()
    return [Decision(w, d, sf, now) for w, d, sf in rows]


def _arm_all_due(db, workers, cron_expr="* * * * *"):
    db.execute(
        "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone, next_run_at) "
        "SELECT w, %s, 'UTC', now() - interval '1 minute' FROM unnest(%s::text[]) w",
        (cron_expr, workers),
    )


def test_three_schedulers_racing_enqueue_each_period_once(db, db_dsn):
    workers = make_workers(db, N_WORKERS, "race")
    _arm_all_due(db, workers)
    conns = [psycopg.connect(db_dsn, autocommit=True) for _ in range(3)]
    decisions: list[list[Decision]] = [[] for _ in conns]
    slot_samples = []
    try:
        for rnd in range(ROUNDS):
            barrier = threading.Barrier(len(conns))

            def racer(i):
                barrier.wait()
                decisions[i].extend(one_tick(conns[i], f"racer-{i}"))

            threads = [threading.Thread(target=racer, args=(i,)) for i in range(len(conns))]
            for t in threads:
                t.start()
            while any(t.is_alive() for t in threads):
                slot_samples.extend(busy_slots(db))  # sampled while the racers tick
            for t in threads:
                t.join()
            # the period passes: free every slot on odd rounds (even rounds: the tick must skip)
            if rnd % 2:
                db.execute(
                    "UPDATE scrinalia.archive_worker_runs SET status = 'SUCCEEDED', finished_at = now() "
                    "WHERE status = 'QUEUED'"
                )
            db.execute(
                "UPDATE scrinalia.archive_worker_schedules SET next_run_at = now() - interval '1 second' "
                "WHERE next_run_at > now()"
            )
    finally:
        for c in conns:
            c.close()
    flat = [d for ds in decisions for d in ds]
    per_round = len(flat) / ROUNDS
    # each due schedule was decided by exactly one racer per round: SKIP LOCKED partitions them
    assert len(flat) == N_WORKERS * ROUNDS, per_round
    enq = sum(d.decision == "ENQUEUED" for d in flat)
    runs = db.execute("SELECT count(*) FROM scrinalia.archive_worker_runs").fetchone()[0]
    assert enq == runs
    assert slot_samples == []
    assert check_all(db) == []
    # even rounds find every slot free (enqueue), odd rounds find it taken (skip)
    assert enq == N_WORKERS * ((ROUNDS + 1) // 2)
    RESULTS["racing"] = {
        "racers": len(conns),
        "workers": N_WORKERS,
        "rounds": ROUNDS,
        "decisions_per_racer": [len(d) for d in decisions],
        "enqueued": enq,
    }


def test_holder_killed_between_due_and_tick_loses_nothing(db, db_dsn, admin):
    workers = make_workers(db, 50, "kill")
    _arm_all_due(db, workers)
    # the victim is a holder as the daemon is one: its lock session holds the key and its
    # heartbeat vouches for the work session that ticks (a session named a scheduler
    # process's is held to the lock, whatever its login)
    lock = psycopg.connect(db_dsn, autocommit=True, application_name="scrinalia-scheduler lock (victim)")
    assert lock.execute("SELECT pg_try_advisory_lock(scrinalia.scheduler_lock_key())").fetchone()[0]
    a = psycopg.connect(db_dsn, autocommit=True, application_name="scrinalia-scheduler (victim)")
    assert lock.execute("SELECT scrinalia.scheduler_heartbeat('victim', %s)", (a.info.backend_pid,)).fetchone()[0]
    b = psycopg.connect(db_dsn, autocommit=True)  # the owner by hand, in the standby's place
    a.execute("BEGIN")
    held = a.execute("SELECT worker_name, db_now FROM scrinalia.due_schedules()").fetchall()
    assert len(held) == 50
    # the standby sees nothing while the victim holds the rows: it cannot tick them too
    assert one_tick(b, "standby") == []
    for pid in (a.info.backend_pid, lock.info.backend_pid):  # what SIGKILL of the holder amounts to
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    with pytest.raises(psycopg.OperationalError):
        a.execute(
            "SELECT * FROM scrinalia.tick(%s::text[], %s::timestamptz[])",
            ([h[0] for h in held], [h[1] + timedelta(minutes=1) for h in held]),
        )
    a.close()
    lock.close()
    t0 = time.monotonic()
    ds = []
    while len(ds) < 50 and time.monotonic() - t0 < 10:  # the rows are free once the backend is gone
        ds += one_tick(b, "standby")
    b.close()
    assert sorted(d.worker for d in ds) == sorted(workers)
    assert {d.decision for d in ds} == {"ENQUEUED"}
    assert check_all(db) == []
    RESULTS["kill_between_due_and_tick_s"] = round(time.monotonic() - t0, 3)


def test_lock_dies_with_its_connection_and_the_standby_takes_it(db, db_dsn):
    key = db.execute("SELECT scrinalia.scheduler_lock_key()").fetchone()[0]
    holder = psycopg.connect(db_dsn, autocommit=True, application_name="scrinalia-scheduler lock (test)")
    standby = psycopg.connect(db_dsn, autocommit=True)
    assert holder.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]
    assert not standby.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]
    st = db.execute("SELECT lock_held, holder_pid, holder_application FROM scrinalia.scheduler_status()").fetchone()
    assert st == (True, holder.info.backend_pid, "scrinalia-scheduler lock (test)")
    victims = db.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE application_name LIKE 'scrinalia-scheduler lock%%' AND datname = current_database()"
    ).fetchall()
    assert victims == [(True,)]
    t0 = time.monotonic()
    got = wait_for(
        lambda: standby.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0],
        timeout=10,
        interval=0.01,
        what="the standby taking the lock",
    )
    took = time.monotonic() - t0
    assert got
    # the old holder finds out at its next statement: it must stop ticking there
    with pytest.raises(psycopg.OperationalError):
        holder.execute("SELECT 1")
    assert db.execute("SELECT holder_pid FROM scrinalia.scheduler_status()").fetchone()[0] == standby.info.backend_pid
    standby.close()
    holder.close()
    RESULTS["lock_takeover_after_terminate_s"] = round(took, 4)


@pytest.fixture(scope="module")
def own_cluster():
    """A cluster of this module's own: restarting it must not break the session's."""
    c = start_cluster()
    try:
        yield c
    finally:
        c.stop()


def test_postgres_restart_mid_tick_neither_loses_nor_doubles(own_cluster):
    admin = psycopg.connect(own_cluster.dsn("postgres"), autocommit=True)
    admin.execute("DROP DATABASE IF EXISTS sw_restart")
    admin.execute("CREATE DATABASE sw_restart")
    admin.close()
    dsn = own_cluster.dsn("sw_restart")
    migrate(dsn, create_groups=True)
    conn = psycopg.connect(dsn, autocommit=True)
    workers = make_workers(conn, 100, "rs")
    # armed on a real period two minutes ago: the scheduler was "down" for one period since
    conn.execute(
        "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone, next_run_at) "
        "SELECT w, '* * * * *', 'UTC', date_trunc('minute', now()) - interval '2 minutes' "
        "FROM unnest(%s::text[]) w",
        (workers,),
    )
    window_start = conn.execute("SELECT date_trunc('minute', now()) - interval '2 minutes 1 second'").fetchone()[0]
    # a tick in flight when the server goes down
    conn.execute("BEGIN")
    due = conn.execute("SELECT worker_name, db_now FROM scrinalia.due_schedules()").fetchall()
    assert len(due) == 100
    t0 = time.monotonic()
    own_cluster.restart()
    with pytest.raises(psycopg.OperationalError):
        conn.execute(
            "SELECT * FROM scrinalia.tick(%s::text[], %s::timestamptz[])",
            ([d[0] for d in due], [d[1] + timedelta(minutes=1) for d in due]),
        )
    conn.close()

    # reconnect (with a deadline) and carry on
    def reconnect() -> psycopg.Connection | None:
        try:
            return psycopg.connect(dsn, autocommit=True)
        except psycopg.OperationalError:
            return None

    conn = wait_for(reconnect, timeout=30, interval=0.1, what="PostgreSQL back")
    back = time.monotonic() - t0
    assert conn.execute("SELECT count(*) FROM scrinalia.archive_worker_runs").fetchone()[0] == 0
    ds = one_tick(conn, "after-restart")
    assert len(ds) == 100 and {d.decision for d in ds} == {"ENQUEUED"}
    assert one_tick(conn, "again") == []  # the period is done: a second tick finds nothing due
    assert check_all(conn) == [] and double_periods(conn) == []
    end = conn.execute("SELECT now()").fetchone()[0]
    for w in workers[:10]:
        # the missed minute(s) are one catch-up, not lost
        assert lost_periods(conn, w, "* * * * *", "UTC", (window_start, end), ds) == []
    conn.close()
    RESULTS["restart_reconnect_s"] = round(back, 2)


RESULTS: dict = {}


def teardown_module(module):
    if RESULTS:
        print("\nRELIABILITY races:", RESULTS)
