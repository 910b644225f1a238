"""Waiting for a condition: the one way tests and benchmarks await something."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Protocol, TypeVar

T = TypeVar("T")


class Watched(Protocol):
    """What wait_for needs of a process it watches (testkit.procs.Proc)."""

    def exit_reason(self) -> str | None: ...


def wait_for(
    predicate: Callable[[], T],
    timeout: float = 10.0,
    interval: float = 0.05,
    what: str = "condition",
    watch: Iterable[Watched] = (),
) -> T:
    """Polls predicate() every `interval` seconds until it returns a truthy value and
    returns that value; AssertionError naming `what` after `timeout` seconds, or as
    soon as a process in `watch` has exited (nothing it was to do can happen then)."""
    watched = list(watch)
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        for p in watched:
            reason = p.exit_reason()
            if reason is not None:
                raise AssertionError(f"{what}: {reason}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout}s")
        time.sleep(interval)
