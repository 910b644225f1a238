"""How long the holder waits between passes, and how a NOTIFY shortens the wait.

The due instants come from the database (scrinalia.next_wakeup(), measured against
its now()); the waiting is measured on the daemon's clock (scrinalia_workers.clock),
so the tests drive it with a fake one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from scrinalia_workers.clock import Clock

# After a pass that found work it could not take (schedule rows locked by another
# transaction), wait this long rather than spin on a due instant in the past.
NO_PROGRESS_SLEEP = 0.5
# The shortest sleep: the due instant is computed by the database, we may wake a hair early.
MIN_SLEEP = 0.005
# How long one wait on the socket lasts before the stop flag is looked at again.
POLL_SLICE = 0.2


def prepares(wake_in: float | None, progressed: bool, max_sleep: float) -> bool:
    """Whether the next due instant, `wake_in` seconds away, is near enough to prepare
    its tick during this wait (scheduler.prepared)."""
    return wake_in is not None and (wake_in > 0 or progressed) and wake_in <= max_sleep


def delay_after_pass(wake_in: float | None, progressed: bool, max_sleep: float, lead: float = 0.0) -> float:
    """The wait after a pass: until the next due instant (`wake_in` seconds away, None
    when nothing is armed), `lead` earlier when a prepared tick goes out ahead of it,
    at least MIN_SLEEP and at most max_sleep; NO_PROGRESS_SLEEP when work is due that
    the pass could not take."""
    if wake_in is None:
        return max_sleep
    if wake_in <= 0 and not progressed:
        return NO_PROGRESS_SLEEP  # due work we could not take (rows locked elsewhere)
    return min(max(wake_in - lead, MIN_SLEEP), max_sleep)


def wait(
    delay: float,
    *,
    clock: Clock,
    stop: threading.Event,
    last_pass: float,
    min_wake_interval: float,
    notified: Callable[[float], bool],
) -> None:
    """Waits `delay` seconds, or less when a NOTIFY says there is work. `notified(t)`
    waits up to t seconds for one (on the lock session's socket) and says whether it
    came. Wake-ups are coalesced and at most one per min_wake_interval after the last
    pass (`last_pass`, on `clock`), so a NOTIFY flood from any login costs a few passes
    a second, not one per message. Returns at once when `stop` is set."""
    deadline = clock.monotonic() + delay
    woken = False
    while not stop.is_set():
        now = clock.monotonic()
        until = min(deadline, last_pass + min_wake_interval) if woken else deadline
        if now >= until:
            return
        if notified(min(until - now, POLL_SLICE)):
            woken = True
