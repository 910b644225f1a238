"""What a running handler can learn about its run: whether it must stop, and why.

The runner tells a handler, on the handler's own thread, when its run was cancelled,
ran past its maximum run time, lost its lease, or the runner is shutting down. Nothing
the handler does after that counts: the run has ended (or will, after the grace), and
another runner may already hold its next attempt. A handler that works in steps asks
between them (docs/handlers.md):

    from scrinalia_workers.runner import context

    def handler(run):
        for chunk in chunks(run["config"]):
            context.check()           # raises RunStopped once the run must stop
            process(chunk)
            if context.sleep(5):      # a pause that ends early when the run must stop
                return "stopped early"

Outside a runner's handler thread (a unit test calling the handler directly) the run
never has to stop.
"""

from __future__ import annotations

import threading
import time

from scrinalia_workers.runner.run import StopSignal

_current = threading.local()


class RunStopped(Exception):
    """Raised by check() once the run must stop; its message says why."""


def _signal() -> StopSignal | None:
    return getattr(_current, "stop", None)


def stop_reason() -> str | None:
    """Why the run must stop (for example "cancelled by ops", "lease lost: ..."); None
    while it may go on."""
    stop = _signal()
    return stop.reason if stop is not None and stop.is_set() else None


def should_stop() -> bool:
    stop = _signal()
    return stop is not None and stop.is_set()


def check() -> None:
    """Raises RunStopped when the run must stop."""
    reason = stop_reason()
    if reason is not None:
        raise RunStopped(reason)


def sleep(seconds: float) -> bool:
    """Sleeps up to `seconds`; True, early, as soon as the run must stop."""
    stop = _signal()
    if stop is None:
        time.sleep(max(seconds, 0))
        return False
    return stop.wait(max(seconds, 0))


def bind(stop: StopSignal | None) -> None:
    """The handler thread's run from here on (None: between runs)."""
    _current.stop = stop
