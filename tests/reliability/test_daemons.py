"""Scenario D with the real daemons: three schedulers racing, the holder frozen
(SIGSTOP) right after a tick and then SIGKILLed, the lock connection terminated
from the server side, a runner SIGKILLed mid-run. Log lines (--json) are read
as they come; every wait polls with a deadline.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from helpers import make_workers
from invariants import check_all

pytest.importorskip("scrinalia_workers.scheduler")

RETRY = 0.5  # --standby-retry: the takeover bound under test


class Daemon:
    def __init__(self, module: str, *args: str):
        self.p = subprocess.Popen(
            [sys.executable, "-m", f"scrinalia_workers.{module}", "--json", *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.events: list[dict] = []
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        for line in self.p.stderr:
            try:
                e = json.loads(line)
            except ValueError:
                e = {"event": "raw", "line": line.rstrip()}
            e["_mono"] = time.monotonic()
            self.events.append(e)

    def wait_for(self, event, after: float = 0.0, timeout: float = 20.0) -> dict:
        wanted = (event,) if isinstance(event, str) else tuple(event)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for e in list(self.events):
                if e.get("event") in wanted and e["_mono"] >= after:
                    return e
            if self.p.poll() is not None and not self.t.is_alive():
                break
            time.sleep(0.02)
        raise AssertionError(f"no {event!r} within {timeout}s: {[e.get('event') for e in self.events][-15:]}")

    def has(self, event: str, after: float = 0.0) -> bool:
        return any(e.get("event") == event and e["_mono"] >= after for e in list(self.events))

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGCONT)
            self.p.terminate()
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


def schedulers(dsn: str, n: int) -> list[Daemon]:
    return [
        Daemon("scheduler", "--dsn", dsn, "--name", f"s{i}", "--standby-retry", str(RETRY), "--max-sleep", "0.5")
        for i in range(n)
    ]


def _holder(ds: list[Daemon]) -> Daemon:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        held = [d for d in ds if d.has("lock acquired") and d.p.poll() is None]
        if held:
            return held[-1]
        time.sleep(0.02)
    raise AssertionError("no scheduler took the lock")


def _due_now(db, deadline: float = 20.0):
    end = time.monotonic() + deadline
    while db.execute("SELECT count(*) FROM scrinalia.archive_worker_schedules WHERE next_run_at IS NULL").fetchone()[0]:
        assert time.monotonic() < end, "the schedules were never armed"
        time.sleep(0.02)
    db.execute(
        "UPDATE scrinalia.archive_worker_schedules SET next_run_at = now() - interval '1 second' "
        "WHERE next_run_at IS NOT NULL"
    )


def test_three_schedulers_sigstop_then_sigkill_the_holder(db, db_dsn):
    workers = make_workers(db, 30, "d")
    db.execute(
        "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone) "
        "SELECT w, '* * * * *', 'UTC' FROM unnest(%s::text[]) w",
        (workers,),
    )
    ds = schedulers(db_dsn, 3)
    takeovers = []
    try:
        for _ in range(2):
            holder = _holder(ds)
            t = time.monotonic()
            _due_now(db)
            holder.wait_for(("enqueued", "skipped"), after=t)  # it has ticked: freeze it, then kill it
            os.kill(holder.p.pid, signal.SIGSTOP)
            _due_now(db)  # a period becomes due while the holder is frozen, still holding the lock
            time.sleep(RETRY * 2)  # (a window to show nobody else ticks; not a wait for a condition)
            others = [d for d in ds if d is not holder and d.p.poll() is None]
            assert not any(d.has("lock acquired", after=t) for d in others), "a standby took a held lock"
            killed = time.monotonic()
            holder.p.kill()
            holder.p.wait()
            new = None
            deadline = time.monotonic() + 20
            while new is None and time.monotonic() < deadline:
                new = next((d for d in others if d.has("lock acquired", after=killed)), None)
                time.sleep(0.01)
            assert new is not None, "no standby took over"
            took = new.wait_for("lock acquired", after=killed)["_mono"] - killed
            takeovers.append(round(took, 3))
            new.wait_for(("enqueued", "skipped"), after=killed)
            assert took < RETRY + 5, took
        problems = check_all(db)
        assert problems == []
        # every period that came due was enqueued or skipped once, never twice
        assert db.execute("SELECT count(*) FROM scrinalia.archive_worker_runs").fetchone()[0] == len(workers)
    finally:
        for d in ds:
            d.stop()
    print("\nRELIABILITY takeover after SIGKILL (s):", takeovers)


def test_terminated_lock_connection_stops_ticking_at_once(db, db_dsn):
    workers = make_workers(db, 10, "t")
    db.execute(
        "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone) "
        "SELECT w, '* * * * *', 'UTC' FROM unnest(%s::text[]) w",
        (workers,),
    )
    ds = schedulers(db_dsn, 2)
    try:
        old = _holder(ds)
        next(d for d in ds if d is not old).wait_for("standby")
        t = time.monotonic()
        n = db.execute(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name LIKE 'scrinalia-scheduler lock%%' "
            "AND pid = (SELECT holder_pid FROM scrinalia.scheduler_status())) x"
        ).fetchone()[0]
        assert n == 1
        lost = old.wait_for("lock lost", after=t, timeout=10)
        # someone takes it again (the standby, or the old process itself after its retry)
        deadline = time.monotonic() + 10
        new = None
        while new is None and time.monotonic() < deadline:
            new = next((d for d in ds if d.has("lock acquired", after=t)), None)
            time.sleep(0.01)
        assert new is not None, "nobody took the lock again"
        got = new.wait_for("lock acquired", after=t)
        _due_now(db)
        new.wait_for(("enqueued", "skipped"), after=got["_mono"])
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
                    e
                    for e in d.events
                    if e.get("event") in ("enqueued", "skipped", "armed") and e["_mono"] > got["_mono"]
                ]
        assert db.execute("SELECT lock_held FROM scrinalia.scheduler_status()").fetchone()[0]
        assert check_all(db) == []
        print(
            f"\nRELIABILITY terminate->lock lost {lost['_mono'] - t:.3f}s, re-acquired {got['_mono'] - t:.3f}s "
            f"by the {'same' if new is old else 'standby'} process"
        )
    finally:
        for d in ds:
            d.stop()


def _poll(db, sql, params=(), timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = db.execute(sql, params).fetchone()
        if row and row[0]:
            return row
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for: {sql}")


def test_runner_killed_mid_run_is_interrupted_and_retried(db, db_dsn):
    from psycopg.types.json import Jsonb

    db.execute("SELECT scrinalia.register_worker('slow', '{}', '{}', %s)", (Jsonb({"seconds": {"type": "number"}}),))
    db.execute("SELECT scrinalia.put_schedule('slow', '* * * * *', 'UTC', %s)", (Jsonb({"options": {"seconds": 60}}),))
    sched = schedulers(db_dsn, 1)[0]
    runner = Daemon(
        "runner",
        "--dsn",
        db_dsn,
        "--runner-id",
        "victim",
        "--lease",
        "5",
        "--handlers",
        "scrinalia_workers.demo.load_handlers",
    )
    other = None
    try:
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
        runner.p.kill()
        runner.p.wait()
        # the lease would end in 5 s: let it have ended (the clock is data)
        db.execute(
            "UPDATE scrinalia.archive_worker_runs SET lease_expires_at = now() - interval '1 second' WHERE run_id = %s",
            (run_id,),
        )
        reaped = sched.wait_for("lease reaped")
        assert reaped["run_id"] == run_id
        retry = sched.wait_for("retry created")
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
        other = Daemon(
            "runner",
            "--dsn",
            db_dsn,
            "--runner-id",
            "survivor",
            "--lease",
            "5",
            "--handlers",
            "scrinalia_workers.demo.load_handlers",
        )
        _poll(
            db, "SELECT status = 'SUCCEEDED' FROM scrinalia.archive_worker_runs WHERE run_id = %s", (retry["run_id"],)
        )
        assert check_all(db) == []
        print(f"\nRELIABILITY runner kill: retry waited {float(wait):.1f}s of backoff (moved), attempt 2 SUCCEEDED")
    finally:
        for d in (sched, runner, other):
            if d is not None:
                d.stop()


def test_a_holder_killed_while_its_prepared_spike_waits_loses_nothing_and_doubles_nothing(db, db_dsn):
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
    ds = schedulers(db_dsn, 2)
    try:
        holder = _holder(ds)
        # the prepared call is on the server, waiting for its instant
        _, before = _poll(
            db,
            "SELECT count(*), now() < %s FROM pg_stat_activity WHERE datname = current_database()"
            " AND state = 'active' AND query LIKE '%%scrinalia.tick_due_at(%%'",
            (at,),
        )
        holder.p.kill()
        holder.p.wait()
        _poll(
            db, "SELECT count(*) = %s FROM scrinalia.archive_worker_runs WHERE worker_name LIKE 'k%%'", (len(workers),)
        )
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
    finally:
        for d in ds:
            d.stop()
