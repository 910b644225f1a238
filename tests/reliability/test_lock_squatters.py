"""Several squatter sessions that reconnect in a loop cannot keep the lock from the
scheduler: each sits idle on the key once it has it (pg_advisory_lock, then nothing),
and reconnects at once when its session is ended. The standby ends them while one of
its own sessions waits in the lock's queue, so every eviction hands the lock towards
the scheduler, never to the next squatter already waiting ahead of a standby that had
left the queue to evict."""

from __future__ import annotations

import os
import select
import threading
import time

import psycopg
import pytest

from scrinalia_workers.testkit.waiting import wait_for

pytestmark = pytest.mark.slow

WINDOW = float(os.environ.get("SCRINALIA_SQUAT_SECONDS", "60"))


def _as(dsn: str, login: str) -> str:
    return psycopg.conninfo.make_conninfo(dsn, user=login)


class IdleSquatter(threading.Thread):
    """connect, SELECT pg_advisory_lock(key) (waiting in the queue as long as it takes),
    then idle until its session is ended; reconnect at once; until `stop` is set (and
    its session ended by the test)."""

    def __init__(self, dsn: str, key: int, stop: threading.Event):
        super().__init__(daemon=True)
        self.dsn, self.key, self.stop = dsn, key, stop
        self.grabs = 0
        self.ended = 0

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                with psycopg.connect(self.dsn, autocommit=True, application_name="squatter") as c:
                    c.execute("SELECT pg_advisory_lock(%s)", (self.key,))  # its place kept: no timeout
                    self.grabs += 1
                    # idle on it: no statement, the socket read only to see it end
                    while not self.stop.is_set() and not _ended(c):
                        self.stop.wait(0.02)
                    if self.stop.is_set():
                        return
            except psycopg.OperationalError:
                pass
            self.ended += 1


def _ended(c: psycopg.Connection) -> bool:
    """Whether the server ended the session (its notice, then EOF on the socket),
    looked at without sending a statement: the squatter stays idle."""
    readable, _, _ = select.select([c.pgconn.socket], [], [], 0)
    if not readable:
        return False
    try:
        c.pgconn.consume_input()
    except psycopg.OperationalError:
        return True
    return c.pgconn.status != psycopg.pq.ConnStatus.OK


def held_share(
    db, db_dsn, role_logins, procs, squatters: int, schedulers: int, window: float
) -> tuple[float, list[IdleSquatter], list]:
    key = db.execute("SELECT scrinalia.scheduler_lock_key()").fetchone()[0]
    stop = threading.Event()
    threads = [IdleSquatter(_as(db_dsn, role_logins["reader"]), key, stop) for _ in range(squatters)]
    for t in threads:
        t.start()  # first: they hold the key, and wait for it, before any scheduler starts
    wait_for(lambda: sum(t.grabs for t in threads) >= 1, timeout=10, what="a squatter on the key")
    wait_for(
        lambda: (
            db.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = %s::bigint & 4294967295",
                (key,),
            ).fetchone()[0]
            >= squatters
        ),
        timeout=10,
        what="every squatter on the key or in its queue",
    )
    sched = _as(db_dsn, role_logins["scheduler"])
    started = [procs.scheduler(sched, "--name", f"s{i}") for i in range(schedulers)]
    for p in started:
        p.wait_event(("standby", "stale holder evicted", "lock acquired"), timeout=20)
    samples: list[str | None] = []
    named = 0
    t0 = time.monotonic()
    while time.monotonic() - t0 < window:
        role, healthy, reason = db.execute(
            "SELECT holder_role, healthy, reason FROM scrinalia.scheduler_health()"
        ).fetchone()
        samples.append(role)
        named += role == role_logins["reader"] and not healthy and role_logins["reader"] in (reason or "")
        wait_for(lambda: time.monotonic() - t0 >= len(samples) * 0.05, timeout=1, interval=0.005)
    stop.set()
    db.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'squatter'")
    for t in threads:
        t.join(timeout=5)
    held = samples.count(role_logins["scheduler"]) / len(samples)
    assert named == samples.count(role_logins["reader"])  # health named the squatter whenever it held the key
    return held, threads, started


@pytest.mark.parametrize("schedulers", [1, 2])
@pytest.mark.parametrize("squatters", [1, 2, 4, 8])
def test_reconnecting_squatters_leave_the_scheduler_holding_the_lock(
    db, db_dsn, role_logins, procs, squatters, schedulers
):
    held, threads, started = held_share(db, db_dsn, role_logins, procs, squatters, schedulers, WINDOW)
    print(
        f"\nRELIABILITY {squatters} idle squatter(s) reconnecting, {schedulers} scheduler(s), {WINDOW:.0f} s:"
        f" a scheduler held the lock {held:.1%}; grabs {sum(t.grabs for t in threads)},"
        f" sessions ended {sum(t.ended for t in threads)}"
    )
    assert held >= 0.95, (held, [p.tail() for p in started])
    assert sum(p.count("lock acquired") for p in started) == 1  # taken once, and kept
