"""Reconnecting after a transient failure: exponential backoff with jitter, and
which errors count as transient. Shared by the scheduler and the runner (the shape
of graphile-worker's reconnect: double the delay up to a cap, randomise it so that a
fleet restarted together does not reconnect in lockstep)."""

from __future__ import annotations

import random

import psycopg

from scrinalia_workers.errors import DatabaseUnavailable

# SQLSTATE classes and codes a retry can outlive: connection exceptions (08),
# operator intervention (57: admin/crash shutdown, cannot connect now), and
# insufficient resources (53: too many connections, out of memory).
_TRANSIENT_CLASSES = ("08", "53", "57")


def is_transient(exc: BaseException) -> bool:
    """True for errors that mean "the database is not reachable right now"."""
    if isinstance(exc, DatabaseUnavailable):
        return True
    if isinstance(exc, psycopg.Error):
        state = exc.sqlstate or ""
        if state[:2] in _TRANSIENT_CLASSES:
            return True
        # libpq-level failures (server closed the connection, timeouts) carry no SQLSTATE
        return not state and isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError))
    return False


class Backoff:
    """Delays for successive failed attempts: base * 2^n, capped, with +-jitter."""

    def __init__(self, base: float = 0.2, cap: float = 5.0, jitter: float = 0.25, rng: random.Random | None = None):
        if base <= 0 or cap < base or not 0 <= jitter < 1:
            raise ValueError("Backoff needs 0 < base <= cap and 0 <= jitter < 1")
        self.base, self.cap, self.jitter = base, cap, jitter
        self._rng = rng or random.Random()
        self.failures = 0

    def next_delay(self) -> float:
        """The delay before the next attempt; each call counts one more failure."""
        raw = min(self.base * (2 ** min(self.failures, 30)), self.cap)
        self.failures += 1
        return raw * (1 + self._rng.uniform(-self.jitter, self.jitter))

    def reset(self) -> None:
        self.failures = 0
