"""How every drain of benchmark 5 is timed and how its rounds are interrupted,
shared by ours (bench/drain_bench.py) and the peers' (bench/peers_drain.py)."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple

from scrinalia_workers.testkit.procs import Proc
from scrinalia_workers.testkit.waiting import wait_for

from . import machine
from .common import check, conn, now

POLL = 0.01
# Every system's workers, once their sessions show them in their idle wait, are left
# this long before the jobs commit: whatever they do after start-up (a first fetch, a
# LISTEN still being sent, a timer) is over before the clock starts.
SETTLE = 1.0


class Drained(NamedTuple):
    seconds: float  # from the enqueue's return to the last job done
    enqueue: float  # the enqueue's own seconds
    wal: float  # the cluster's WAL bytes written from the enqueue to the last job done
    checkpoints: int  # the checkpoints begun meanwhile

    def figures(self, n: int) -> dict:
        """A drain's figures for the rounds (bench/drain_bench.py run()) of n jobs."""
        return {
            "rate": n / self.seconds,
            "elapsed": self.seconds,
            "enqueue": self.enqueue,
            "wal": self.wal,
            "checkpoints": self.checkpoints,
        }


def timed_drain(dsn: str, make_visible, live_sql: str, done_sql: str, workers_alive) -> Drained:
    """Runs make_visible(conn) (the system's enqueue API: one commit that makes the N
    jobs visible) and times from its return until done_sql is true. While live_sql
    (does a job still wait or run?) is true, only it is polled: it reads the system's
    index of live jobs, so the poll costs the same however much history the table
    holds; done_sql (the count of the N done) is read once nothing is live. Each system
    is polled this way. The enqueue's seconds: make_visible may return its own call's
    (without its connecting), else its whole call counts. The WAL and checkpoints
    from the enqueue on, after each system's own set-up (ours seeds its workers)."""
    with conn(dsn) as c:

        def finished() -> bool:
            done = not c.execute(live_sql).fetchone()[0] and c.execute(done_sql).fetchone()[0]
            if not done:
                check(workers_alive(), "a worker process exited before the jobs were done")
            return done

        wal, checkpoints = machine.wal_mark(c)
        t0 = now()
        took = make_visible(c)
        t1 = now()
        wait_for(finished, timeout=600, interval=POLL, what="the jobs done")
        seconds = now() - t1
        wal_after, checkpoints_after = machine.wal_mark(c)
        return Drained(
            seconds,
            took if isinstance(took, float) else t1 - t0,
            wal_after - wal,
            checkpoints_after - checkpoints,
        )


def await_sessions(dsn: str, sql: str, k: int, what: str, watch: list[Proc] | None = None) -> None:
    """Waits until k sessions match sql (pg_stat_activity): the workers are connected
    and idle, waiting for work; then SETTLE seconds more."""
    with conn(dsn) as c:
        wait_for(
            lambda: c.execute(sql).fetchone()[0] >= k,
            timeout=60,
            what=f"{what}: the workers connected and idle",
            watch=watch or (),
        )
    time.sleep(SETTLE)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM ends the rounds as Ctrl-C does: the finally blocks around every worker
    process end them (a worker in a session of its own never sees the terminal's
    signal), so an interrupted run leaves no process behind."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)
