"""The daemons' own clock: what they measure intervals with and how they pause.

The database's now() decides everything that is recorded (due instants, leases,
not_before); this clock only paces the processes: how long to stand by, when to
heartbeat, when a slow handler's batch is handed back. The daemons take a Clock, so
their loops' tests drive time (testkit.clock.FakeClock) instead of sleeping.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (only differences mean anything)."""
        ...

    def sleep(self, seconds: float) -> None:
        """Pause this thread for `seconds` (a fake clock advances instead)."""
        ...

    def wait(self, event: threading.Event, seconds: float | None) -> bool:
        """Wait until `event` is set or `seconds` have passed; True when it was set."""
        ...


class SystemClock:
    """The real clock: time.monotonic, time.sleep, Event.wait."""

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    def wait(self, event: threading.Event, seconds: float | None) -> bool:
        return event.wait(seconds)


SYSTEM = SystemClock()
