"""The scheduler lock cannot be kept from a scheduler: a login that reconnects and takes
the key again after each eviction, a superuser session on the key, and a scheduler
whose lock session lost the lock while its work session still runs."""

from __future__ import annotations

import os
import threading
import time

import psycopg
import pytest

from scrinalia_workers.testkit.waiting import wait_for

pytestmark = pytest.mark.slow

SQUAT_FOR = float(os.environ.get("SCRINALIA_SQUAT_SECONDS", "60"))


def _as(dsn: str, login: str) -> str:
    return psycopg.conninfo.make_conninfo(dsn, user=login)


class Squatter(threading.Thread):
    """Connects as a login in no group, takes the key whenever it can and sits on it
    until its session is ended, then reconnects at once: for `seconds`. `how`: "try"
    (pg_try_advisory_lock in a loop, then idle) or "queue" (pg_advisory_lock, waiting
    in the lock's queue, then busy in a statement)."""

    def __init__(self, dsn: str, key: int, seconds: float, how: str):
        super().__init__(daemon=True)
        self.dsn, self.key, self.seconds, self.how = dsn, key, seconds, how
        self.grabs = 0
        self.ended = 0

    def _squat(self, c: psycopg.Connection, until: float) -> None:
        if self.how == "queue":
            c.execute(
                "SELECT set_config('statement_timeout', %s, false)", (str(int((until - time.monotonic()) * 1000) + 1),)
            )
            c.execute("SELECT pg_advisory_lock(%s)", (self.key,))
            self.grabs += 1
            c.execute("SELECT pg_sleep(3600)")  # active, not idle
            return
        while time.monotonic() < until:
            if c.execute("SELECT pg_try_advisory_lock(%s)", (self.key,)).fetchone()[0]:
                self.grabs += 1
                while time.monotonic() < until:  # sits on it, idle, until ended
                    c.execute("SELECT 1")
                    time.sleep(0.02)
                return
            time.sleep(0.005)

    def run(self) -> None:
        until = time.monotonic() + self.seconds
        while time.monotonic() < until:
            try:
                with psycopg.connect(self.dsn, autocommit=True, application_name="squatter") as c:
                    self._squat(c, until)
            except psycopg.errors.QueryCanceled:
                return  # its statement_timeout: the end of the test
            except psycopg.OperationalError:
                self.ended += 1


@pytest.mark.parametrize("how", ["try", "queue"])
def test_a_reconnecting_squatter_leaves_the_scheduler_holding_the_lock(db, db_dsn, role_logins, procs, how):
    key = db.execute("SELECT scrinalia.scheduler_lock_key()").fetchone()[0]
    squatter = Squatter(_as(db_dsn, role_logins["nobody"]), key, SQUAT_FOR + 5, how)
    squatter.start()  # first: it holds the key before any scheduler starts
    wait_for(lambda: squatter.grabs >= 1, timeout=10, what="the squatter on the key")
    a = procs.scheduler(db_dsn, "--standby-retry", "0.5", "--max-sleep", "1")
    a.wait_event(("standby", "stale holder evicted"), timeout=15)  # it is up, and has looked
    me = db.execute("SELECT current_user").fetchone()[0]  # the scheduler's login
    samples: list[str | None] = []
    named = 0
    t0 = time.monotonic()
    while time.monotonic() - t0 < SQUAT_FOR:
        # one statement: the holder and what health says of it, from one snapshot
        role, healthy, reason = db.execute(
            "SELECT holder_role, healthy, reason FROM scrinalia.scheduler_health()"
        ).fetchone()
        samples.append(role)
        named += role == role_logins["nobody"] and not healthy and role_logins["nobody"] in (reason or "")
        wait_for(lambda: time.monotonic() - t0 >= len(samples) * 0.05, timeout=1, interval=0.005)
    held = samples.count(me) / len(samples)
    squatted = samples.count(role_logins["nobody"])
    print(
        f"\nRELIABILITY squatter ({how}) reconnecting for {SQUAT_FOR:.0f} s: the scheduler held the lock"
        f" {held:.1%} of {len(samples)} samples; squatter grabs {squatter.grabs}, sessions ended {squatter.ended}"
    )
    assert held >= 0.95, (held, squatter.grabs, a.tail())
    assert named == squatted  # health named the squatter whenever it held the key
    # It took the lock once and kept it. A stall of the machine longer than the holder's
    # idle limit ends its sessions whatever the squatter does: such a loss is logged with
    # its reason, and the lock comes back; the squatter never makes it lose the lock, so
    # that happens at most once in the window, and it is the squatter's only other grab.
    lost = a.count("lock lost")
    assert a.count("lock acquired") == 1 + lost, a.tail(80)  # never re-acquired silently
    assert lost <= 1 and squatter.grabs <= 1 + lost, a.tail(80)
    squatter.join(timeout=SQUAT_FOR)
