"""Stand-ins for the runner's threads, wake-up and database calls, driven by a FakeClock.

A batch (scrinalia_workers.runner.batch) under test runs on the test's own thread:
SteppedHandlers is the real HandlerThread without its thread (the test starts and ends
each handler call at a scripted instant), ScriptedWakeup advances the fake clock to the
next scripted instant or deadline instead of blocking, and FakeLedger answers the
database calls and records when each was made.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from scrinalia_workers.runner.handler_thread import HandlerThread
from scrinalia_workers.runner.handlers import Outcome
from scrinalia_workers.runner.run import ClaimedRun, Reported
from scrinalia_workers.runner.run_states import RunState
from scrinalia_workers.runner.wakeup import Wakeup
from scrinalia_workers.testkit.clock import FakeClock

OK = Outcome("SUCCEEDED")


class ScriptedWakeup:
    """The wake-up of a batch under test: wait() returns at once when rung; else it
    moves the clock to the next scripted event (and runs it) or to the timeout,
    whichever comes first."""

    def __init__(self, clock: FakeClock):
        self.clock = clock
        self.rung = False
        self.waits: list[tuple[float, float | None]] = []  # (when, timeout)
        self._events: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()

    def at(self, when: float, action: Callable[[], None]) -> None:
        """Runs action when the clock reaches `when` (an instant of self.clock)."""
        heapq.heappush(self._events, (when, next(self._order), action))

    def ring(self) -> None:
        self.rung = True

    def wait(self, timeout: float | None, also: int | None = None) -> bool:
        self.waits.append((self.clock.monotonic(), timeout))
        if len(self.waits) > 10_000:
            raise AssertionError("the loop under test never ends")
        if self.rung:
            self.rung = False
            return False
        now = self.clock.monotonic()
        due = now + timeout if timeout is not None else None
        if self._events and (due is None or self._events[0][0] <= due):
            when, _, action = heapq.heappop(self._events)
            self.clock.advance(max(when - now, 0))
            action()
            self.rung = False  # this wait ends now anyway
            return False
        if due is None:
            raise AssertionError("the loop under test would wait for ever")
        self.clock.advance(timeout or 0)
        return False


class SteppedHandlers(HandlerThread):
    """The real HandlerThread's queue, without its thread: start() takes the next run
    up, finish() ends the current one, each at the instant the test says."""

    def _start_thread(self) -> threading.Thread:
        return threading.current_thread()  # no thread of its own: the test steps it

    def start(self) -> int:
        nxt = self.begin_next()
        assert nxt is not None, "no run left to start"
        self._run = nxt[1]
        return self._run.run_id

    def finish(self, outcome: Outcome = OK) -> None:
        assert self.current is not None, "no handler running"
        self.end(self._run, outcome)


def _came(state: RunState) -> Reported:
    return Reported(state, None if state is RunState.REPORTED else "the fake ledger's answer")


@dataclass
class FakeLedger:
    """Answers heartbeat/release/report as told, and records when each was called."""

    clock: FakeClock
    lost_at_heartbeat: set[int] = field(default_factory=set)
    ends: dict[int, RunState] = field(default_factory=dict)  # report's answer; else REPORTED
    heartbeats: list[tuple[float, list[int]]] = field(default_factory=list)
    releases: list[tuple[float, list[int], str]] = field(default_factory=list)
    reports: list[tuple[float, list[tuple[int, Outcome]], bool]] = field(default_factory=list)
    stalls: list[tuple[float, list[int] | None, int, float]] = field(default_factory=list)

    def heartbeat(self, runs: list[ClaimedRun]) -> dict[int, str]:
        ids = [r.run_id for r in runs]
        self.heartbeats.append((self.clock.monotonic(), ids))
        return {i: "the run is INTERRUPTED" for i in ids if i in self.lost_at_heartbeat}

    def release(self, runs: list[ClaimedRun], reason: str) -> set[int]:
        self.releases.append((self.clock.monotonic(), [r.run_id for r in runs], reason))
        return {r.run_id for r in runs}

    def report(self, runs: list[ClaimedRun], *, stopping: bool) -> dict[int, Reported]:
        self.reports.append((self.clock.monotonic(), [(r.run_id, r.outcome) for r in runs], stopping))
        return {r.run_id: _came(self.ends.get(r.run_id, RunState.REPORTED)) for r in runs}

    def report_stall(self, run_ids: list[int] | None, threads: int = 0, grace: float = 0.0) -> None:
        self.stalls.append((self.clock.monotonic(), run_ids, threads, grace))


def claimed(run_id: int, worker: str | None = None) -> ClaimedRun:
    """A run as the runner holds it after a claim (a row with the fields it reads)."""
    return ClaimedRun.from_row(
        {
            "run_id": run_id,
            "worker_name": worker or f"w{run_id}",
            "trigger": "SCHEDULE",
            "attempt": 1,
            "lease_token": f"token-{run_id}",
        }
    )


class StopFlag:
    """Runner.stopping, as the batch reads it."""

    def __init__(self) -> None:
        self.set = False

    def __call__(self) -> bool:
        return self.set


class RecordingWakeup(Wakeup):
    """The real wake-up pipe, recording each stand-by on the connection's socket (a
    wait with `also`) and whether a NOTIFY ended it. An endless one ignores the
    stand-by's timeout: only a NOTIFY or a ring (a handler, a stop, a signal) ends it,
    so a test that passes shows that one did."""

    def __init__(self, endless: bool = False) -> None:
        super().__init__()
        self.endless = endless
        self.standing_by = threading.Event()
        self.standbys: list[bool] = []  # True: woken by the socket

    def wait(self, timeout: float | None, also: int | None = None) -> bool:
        if also is None:
            return super().wait(timeout)
        self.standing_by.set()
        woken = super().wait(None if self.endless else timeout, also)
        self.standing_by.clear()
        self.standbys.append(woken)
        return woken
