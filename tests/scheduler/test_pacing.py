"""The holder's waits (scheduler.pacing) and the prepared tick's timing
(scheduler.prepared.Prepared), without a database: a fake clock, and a fake socket
whose NOTIFYs arrive at instants the test chooses."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from scrinalia_workers.scheduler import pacing
from scrinalia_workers.scheduler.pacing import MIN_SLEEP, NO_PROGRESS_SLEEP, POLL_SLICE
from scrinalia_workers.scheduler.prepared import Prepared, ahead_of
from scrinalia_workers.testkit.clock import FakeClock


class Socket:
    """The lock session's socket on a fake clock: notified(t) returns True at the first
    NOTIFY instant within t seconds (the clock moved to it), else False after t."""

    def __init__(self, clock: FakeClock, notify_at=()):
        self.clock = clock
        self.pending = sorted(notify_at)
        self.timeouts: list[float] = []

    def notified(self, timeout: float) -> bool:
        self.timeouts.append(timeout)
        now = self.clock.monotonic()
        due = [t for t in self.pending if t <= now + timeout]
        if due:
            self.pending = [t for t in self.pending if t not in due]
            self.clock.advance(max(max(due) - now, 0.0))
            return True
        self.clock.advance(timeout)
        return False


def _wait(clock, socket, delay, *, last_pass=None, min_wake_interval=0.2, stop=None):
    pacing.wait(
        delay,
        clock=clock,
        stop=stop or threading.Event(),
        last_pass=clock.monotonic() if last_pass is None else last_pass,
        min_wake_interval=min_wake_interval,
        notified=socket.notified,
    )


def test_without_a_notify_the_wait_lasts_the_delay_in_slices():
    clock = FakeClock(start=100.0)
    s = Socket(clock)
    _wait(clock, s, 1.0)
    assert clock.monotonic() == pytest.approx(101.0)
    # in slices: the stop flag is looked at between them
    assert max(s.timeouts) <= POLL_SLICE and sum(s.timeouts) == pytest.approx(1.0)


def test_a_notify_right_after_a_pass_wakes_at_the_minimum_interval():
    clock = FakeClock(start=100.0)
    s = Socket(clock, notify_at=[100.01])
    _wait(clock, s, 5.0, min_wake_interval=0.2)
    assert clock.monotonic() == pytest.approx(100.2)  # not at once, not after 5 s


def test_a_notify_long_after_the_pass_wakes_at_once():
    clock = FakeClock(start=100.0)
    s = Socket(clock, notify_at=[102.5])
    _wait(clock, s, 5.0, min_wake_interval=0.2)
    assert clock.monotonic() == pytest.approx(102.5)


def test_a_notify_flood_is_one_wake_up():
    clock = FakeClock(start=100.0)
    s = Socket(clock, notify_at=[100.0 + i / 1000 for i in range(1, 1000)])
    _wait(clock, s, 5.0, min_wake_interval=0.2)
    assert clock.monotonic() == pytest.approx(100.2)
    assert s.pending  # the rest of the flood is left for the next wait to coalesce


def test_a_notify_never_lengthens_the_wait():
    clock = FakeClock(start=100.0)
    s = Socket(clock, notify_at=[100.01])
    _wait(clock, s, 0.1, min_wake_interval=0.2)
    assert clock.monotonic() == pytest.approx(100.1)


def test_a_stop_ends_the_wait_without_listening():
    clock = FakeClock()
    s = Socket(clock)
    stop = threading.Event()
    stop.set()
    _wait(clock, s, 5.0, stop=stop)
    assert s.timeouts == [] and clock.monotonic() == 1000.0


@pytest.mark.parametrize(
    "wake_in,progressed,lead,expected",
    [
        (None, False, 0.0, 5.0),  # nothing armed: the longest sleep
        (3.0, False, 0.0, 3.0),  # until the instant
        (3.0, True, 0.25, 2.75),  # a prepared tick goes out ahead of it
        (60.0, False, 0.0, 5.0),  # never beyond max_sleep
        (0.001, False, 0.0, MIN_SLEEP),  # never a busy loop
        (-2.0, False, 0.0, NO_PROGRESS_SLEEP),  # due, but the pass could not take it
        (-2.0, True, 0.0, MIN_SLEEP),  # due and the pass progressed: at once again
    ],
)
def test_the_delay_after_a_pass(wake_in, progressed, lead, expected):
    assert pacing.delay_after_pass(wake_in, progressed, 5.0, lead) == pytest.approx(expected)


@pytest.mark.parametrize(
    "wake_in,progressed,expected",
    [(None, True, False), (6.0, True, False), (5.0, False, True), (0.5, False, True), (-1.0, False, False)],
)
def test_only_a_near_instant_is_prepared(wake_in, progressed, expected):
    assert pacing.prepares(wake_in, progressed, 5.0) is expected


def _prepared(ready: float, n: int = 1, next_in=timedelta(days=365)) -> Prepared:
    due = datetime(2026, 3, 1, 10, 0, tzinfo=UTC)
    workers = [f"w{i}" for i in range(n)]
    return Prepared(due, ready, workers, [due + next_in] * n, {w: ("0 0 1 1 *", "UTC") for w in workers})


def test_the_prepared_tick_is_sent_its_lead_ahead_of_its_instant():
    p = _prepared(ready=200.0, n=3)
    assert p.ahead == ahead_of(3)
    assert not p.is_due(200.0 - p.ahead - 0.01)  # an early NOTIFY keeps it for its instant
    assert p.is_due(200.0 - p.ahead)
    assert p.is_due(203.0)


def test_a_prepared_tick_whose_next_occurrence_may_have_passed_is_dropped():
    minutely = _prepared(ready=200.0, next_in=timedelta(minutes=1))
    assert minutely.still_valid(200.0 - minutely.ahead)
    # sent 59 s late (a frozen process, a stopped machine): its next minute is near, computed afresh
    assert not minutely.still_valid(259.0)
    assert not _prepared(ready=200.0, n=0).still_valid(199.9)  # nothing to tick
