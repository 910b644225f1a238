"""Waiting for a condition: the one way tests and benchmarks await something."""

from __future__ import annotations

import time


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.05, what: str = "condition"):
    """Polls predicate() until it returns a truthy value; returns it, or AssertionError."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout}s")
        time.sleep(interval)
