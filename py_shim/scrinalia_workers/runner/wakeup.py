"""What wakes the runner's main thread: a handler that returned, a signal, a NOTIFY."""

from __future__ import annotations

import os
import select
from typing import Protocol


class Waiter(Protocol):
    """What the runner's loops wait on (Wakeup; a fake in the tests)."""

    def ring(self) -> None:
        """Wakes a wait, now or the next one."""
        ...

    def wait(self, timeout: float | None, also: int | None = None) -> bool:
        """Returns when rung, or after timeout seconds; or when the file descriptor
        `also` is readable, and then True."""
        ...


class Wakeup:
    """A self-pipe. The handler thread rings it when a handler returns;
    signal.set_wakeup_fd makes the C-level signal handler ring it, so a signal that
    lands just before the main thread blocks is never missed (a Python-level handler
    alone may run only when the wait times out). Its wait is a select() with a real
    timeout, which the callers compute from their clock's deadlines."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)
        os.set_blocking(self.write_fd, False)

    def ring(self) -> None:
        try:
            os.write(self.write_fd, b"\0")
        except OSError:  # full (it will wake anyway) or closed
            pass

    def wait(self, timeout: float | None, also: int | None = None) -> bool:
        """Returns when rung, or after timeout seconds; or when the file descriptor
        `also` is readable, and then True."""
        fds = [self.read_fd] if also is None else [self.read_fd, also]
        try:
            ready, _, _ = select.select(fds, [], [], timeout)
        except (OSError, ValueError):
            return False
        if self.read_fd in ready:
            try:
                while os.read(self.read_fd, 4096):
                    pass
            except OSError:  # drained (BlockingIOError)
                pass
        return also is not None and also in ready
