"""A clock that tests drive: time moves only when a test (or a sleeping daemon) moves it."""

from __future__ import annotations

import threading


class FakeClock:
    """Implements scrinalia_workers.clock.Clock without ever blocking on real time.

    sleep() and a wait() that times out advance the clock by the time asked for, and
    record it in `slept`, so a loop under test runs as fast as the machine allows and
    the test can assert how long the daemon *would* have waited."""

    def __init__(self, start: float = 1000.0):
        self.now = start
        self.slept: list[float] = []
        self._lock = threading.Lock()

    def monotonic(self) -> float:
        with self._lock:
            return self.now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        if seconds > 0:
            self.advance(seconds)

    def wait(self, event: threading.Event, seconds: float | None) -> bool:
        if event.is_set():
            return True
        if seconds is None:
            event.wait()  # nothing to advance towards: only the event can end this
            return True
        self.sleep(seconds)
        return event.is_set()
