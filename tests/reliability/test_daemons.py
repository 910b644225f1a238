"""Scenario D with the real daemons: three schedulers racing, the holder frozen
(SIGSTOP) right after a tick and then SIGKILLed, the lock connection terminated
from the server side, a runner SIGKILLed mid-run. Log lines (--json) are read
as they come; every wait polls with a deadline.
"""

from __future__ import annotations

import signal
import time

import pytest

from helpers import make_workers
from invariants import check_all
from scrinalia_workers.testkit.procs import Proc
from scrinalia_workers.testkit.waiting import wait_for

pytest.importorskip("scrinalia_workers.scheduler")

RETRY = 0.5  # --standby-retry: the takeover bound under test


def schedulers(procs, dsn: str, n: int) -> list[Proc]:
    return [
        procs.scheduler(dsn, "--name", f"s{i}", "--standby-retry", str(RETRY), "--max-sleep", "0.5") for i in range(n)
    ]


def _runner(procs, dsn: str, runner_id: str) -> Proc:
    return procs.runner(dsn, "scrinalia_workers.demo.load_handlers", "--runner-id", runner_id, "--lease", "5")


def _holder(ds: list[Proc]) -> Proc:
    held = wait_for(
        lambda: [d for d in ds if d.has("lock acquired") and d.running()],
        timeout=20,
        interval=0.02,
        what="a scheduler holding the lock",
    )
    return held[-1]


def _due_now(db, deadline: float = 20.0):
    wait_for(
        lambda: (
            not db.execute(
                "SELECT count(*) FROM scrinalia.archive_worker_schedules WHERE next_run_at IS NULL"
            ).fetchone()[0]
        ),
        timeout=deadline,
        interval=0.02,
        what="the schedules armed",
    )
    db.execute(
        "UPDATE scrinalia.archive_worker_schedules SET next_run_at = now() - interval '1 second' "
        "WHERE next_run_at IS NOT NULL"
    )


def test_three_schedulers_sigstop_then_sigkill_the_holder(db, db_dsn, procs):
    workers = make_workers(db, 30, "d")
    db.execute(
        "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone) "
        "SELECT w, '* * * * *', 'UTC' FROM unnest(%s::text[]) w",
        (workers,),
    )
    ds = schedulers(procs, db_dsn, 3)
    takeovers = []
    for _ in range(2):
        holder = _holder(ds)
        t = time.monotonic()
        _due_now(db)
        holder.wait_event(("enqueued", "skipped"), after=t, timeout=20)  # it has ticked: freeze it, then kill it
        holder.kill(signal.SIGSTOP)
        _due_now(db)  # a period becomes due while the holder is frozen, still holding the lock
        time.sleep(RETRY * 2)  # (a window to show nobody else ticks; not a wait for a condition)
        others = [d for d in ds if d is not holder and d.running()]
        assert not any(d.has("lock acquired", after=t) for d in others), "a standby took a held lock"
        killed = time.monotonic()
        holder.kill()
        holder.popen.wait()
        new = wait_for(
            lambda: next((d for d in others if d.has("lock acquired", after=killed)), None),
            timeout=20,
            interval=0.01,
            what="a standby taking over",
        )
        took = new.wait_event("lock acquired", after=killed, timeout=20)["_mono"] - killed
        takeovers.append(round(took, 3))
        new.wait_event(("enqueued", "skipped"), after=killed, timeout=20)
        assert took < RETRY + 5, took
    problems = check_all(db)
    assert problems == []
    # every period that came due was enqueued or skipped once, never twice
    assert db.execute("SELECT count(*) FROM scrinalia.archive_worker_runs").fetchone()[0] == len(workers)
    print("\nRELIABILITY takeover after SIGKILL (s):", takeovers)


def test_terminated_lock_connection_stops_ticking_at_once(db, db_dsn, procs):
    workers = make_workers(db, 10, "t")
    db.execute(
        "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone) "
        "SELECT w, '* * * * *', 'UTC' FROM unnest(%s::text[]) w",
        (workers,),
    )
    ds = schedulers(procs, db_dsn, 2)
    old = _holder(ds)
    next(d for d in ds if d is not old).wait_event("standby", timeout=20)
    t = time.monotonic()
    n = db.execute(
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE datname = current_database() AND application_name LIKE 'scrinalia-scheduler lock%%' "
        "AND pid = (SELECT holder_pid FROM scrinalia.scheduler_status())) x"
    ).fetchone()[0]
    assert n == 1
    lost = old.wait_event("lock lost", after=t, timeout=10)
    # someone takes it again (the standby, or the old process itself after its retry)
    new = wait_for(
        lambda: next((d for d in ds if d.has("lock acquired", after=t)), None),
        timeout=10,
        interval=0.01,
        what="somebody taking the lock again",
    )
    got = new.wait_event("lock acquired", after=t, timeout=20)
    _due_now(db)
    new.wait_event(("enqueued", "skipped"), after=got["_mono"], timeout=20)
    # between losing it and holding it again, the old process did not tick at all;
    # the process that is not the holder now did not tick after the loss
    reacq = [e["_mono"] for e in old.events if e.get("event") == "lock acquired" and e["_mono"] > lost["_mono"]]
    until = reacq[0] if reacq else float("inf")
    gap_ticks = [
        e
        for e in old.events
        if e.get("event") in ("enqueued", "skipped", "armed") and lost["_mono"] < e["_mono"] < until
    ]
    assert gap_ticks == [], gap_ticks
    for d in ds:
        if d is not new:
            assert not [
                e for e in d.events if e.get("event") in ("enqueued", "skipped", "armed") and e["_mono"] > got["_mono"]
            ]
    assert db.execute("SELECT lock_held FROM scrinalia.scheduler_status()").fetchone()[0]
    assert check_all(db) == []
    print(
        f"\nRELIABILITY terminate->lock lost {lost['_mono'] - t:.3f}s, re-acquired {got['_mono'] - t:.3f}s "
        f"by the {'same' if new is old else 'standby'} process"
    )


def _poll(db, sql, params=(), timeout=20.0):
    return wait_for(
        lambda: (row := db.execute(sql, params).fetchone()) and row[0] and row,
        timeout=timeout,
        what=f"waiting for: {sql}",
    )


def test_runner_killed_mid_run_is_interrupted_and_retried(db, db_dsn, procs):
    from psycopg.types.json import Jsonb

    db.execute("SELECT scrinalia.register_worker('slow', '{}', '{}', %s)", (Jsonb({"seconds": {"type": "number"}}),))
    db.execute("SELECT scrinalia.put_schedule('slow', '* * * * *', 'UTC', %s)", (Jsonb({"options": {"seconds": 60}}),))
    sched = schedulers(procs, db_dsn, 1)[0]
    runner = _runner(procs, db_dsn, "victim")
    _due_now(db)
    try:
        run_id = _poll(
            db,
            "SELECT run_id FROM scrinalia.archive_worker_runs WHERE status = 'RUNNING' AND lease_owner = 'victim'",
            timeout=40,
        )[0]
    except AssertionError:
        raise AssertionError(
            f"the victim never ran: scheduler {[e.get('event') for e in sched.events][-8:]}, "
            f"runner {runner.events[-8:]}, runs "
            f"{db.execute('SELECT run_id, status, lease_owner FROM scrinalia.archive_worker_runs').fetchall()}"
        ) from None
    runner.kill()
    runner.popen.wait()
    # the lease would end in 5 s: let it have ended (the clock is data)
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET lease_expires_at = now() - interval '1 second' WHERE run_id = %s",
        (run_id,),
    )
    reaped = sched.wait_event("lease reaped", timeout=20)
    assert reaped["run_id"] == run_id
    retry = sched.wait_event("retry created", timeout=20)
    assert retry["retry_of"] == run_id and retry["attempt"] == 2
    row = db.execute(
        "SELECT status, error_fingerprint FROM scrinalia.archive_worker_runs WHERE run_id = %s", (run_id,)
    ).fetchone()
    assert (str(row[0]), row[1]) == ("INTERRUPTED", "lease-expired")
    wait = db.execute(
        "SELECT extract(epoch FROM not_before - created_at) FROM scrinalia.archive_worker_runs WHERE run_id = %s",
        (retry["run_id"],),
    ).fetchone()[0]
    assert 48 <= float(wait) <= 72  # 60 s +-20 %
    # the backoff passes (moved, not waited), and this attempt's work is short
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET created_at = created_at - (not_before - now()), "
        "not_before = now(), config = jsonb_set(config, '{options,seconds}', '0.1') "
        "WHERE run_id = %s",
        (retry["run_id"],),
    )
    _runner(procs, db_dsn, "survivor")
    _poll(db, "SELECT status = 'SUCCEEDED' FROM scrinalia.archive_worker_runs WHERE run_id = %s", (retry["run_id"],))
    assert check_all(db) == []
    print(f"\nRELIABILITY runner kill: retry waited {float(wait):.1f}s of backoff (moved), attempt 2 SUCCEEDED")


def test_a_holder_killed_while_its_prepared_spike_waits_loses_nothing_and_doubles_nothing(db, db_dsn, procs):
    """The prepared tick of a spike is sent ahead of its instant (0.25 s + 40 us a
    schedule) and holds its rows and slots until then. SIGKILL the holder inside that
    window: whether the orphaned transaction commits at the instant or dies with its
    client, the standby that takes over leaves every schedule with exactly one run of
    that period, and none due again."""
    workers = make_workers(db, 3000, "k")
    at = db.execute("SELECT date_trunc('second', now()) + interval '4 seconds'").fetchone()[0]
    db.execute(
        "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone, next_run_at) "
        "SELECT w, '0 0 1 1 *', 'UTC', %s FROM unnest(%s::text[]) w",
        (at, workers),
    )
    ds = schedulers(procs, db_dsn, 2)
    holder = _holder(ds)
    # the prepared call is on the server, waiting for its instant
    _, before = _poll(
        db,
        "SELECT count(*), now() < %s FROM pg_stat_activity WHERE datname = current_database()"
        " AND state = 'active' AND query LIKE '%%scrinalia.tick_due_at_v2(%%'",
        (at,),
    )
    holder.kill()
    holder.popen.wait()
    _poll(db, "SELECT count(*) = %s FROM scrinalia.archive_worker_runs WHERE worker_name LIKE 'k%%'", (len(workers),))
    runs = db.execute(
        "SELECT count(*), count(DISTINCT worker_name), min(scheduled_for), max(scheduled_for),"
        " count(DISTINCT xmin::text) FROM scrinalia.archive_worker_runs"
        " WHERE worker_name LIKE 'k%%'"
    ).fetchone()
    assert runs[:4] == (len(workers), len(workers), at, at)
    assert (
        db.execute(
            "SELECT count(*) FROM scrinalia.archive_worker_schedules WHERE worker_name LIKE 'k%%'"
            " AND (next_run_at IS NULL OR next_run_at <= %s)",
            (at,),
        ).fetchone()[0]
        == 0
    )
    assert check_all(db) == []
    assert before, "the prepared call was seen only after its instant: the kill was not inside the window"
    print(
        f"\nRELIABILITY prepared spike, holder killed ahead of the instant: {runs[4]} committing "
        "transaction(s) (1: the orphaned prepared tick committed at the instant)"
    )
