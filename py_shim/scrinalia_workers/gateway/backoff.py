"""Reconnecting after a transient failure: exponential backoff with jitter, and
which errors count as transient. Shared by the scheduler and the runner (the shape
of graphile-worker's reconnect: double the delay up to a cap, randomise it so that a
fleet restarted together does not reconnect in lockstep)."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import psycopg

from scrinalia_workers.clock import SYSTEM, Clock
from scrinalia_workers.errors import DatabaseUnavailable
from scrinalia_workers.gateway import connection

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


# What a connection attempt answers that no wait can mend: the server (or libpq)
# refused this login, database, or security setting. The server's words are English
# unless its lc_messages says otherwise; a translated refusal is then waited on like
# an unreachable server, and said at each report of the wait.
_PERMANENT_CONNECT_FAILURES = (
    "authentication failed",
    "no password supplied",
    "pg_hba.conf",
    "does not exist",  # the database or the role
    "permission denied",
    "is not permitted to log in",
    "ssl was required",
    "does not support ssl",
    "certificate",
    "invalid connection option",
    "invalid sslmode",
    "invalid port",
    "invalid integer value",
    "unsupported startup parameter",  # a pooler (PgBouncer) refusing the keepalive options
)


def is_permanent_connect_failure(message: str) -> bool:
    """True when a failed connection attempt names a refusal rather than an absence."""
    text = message.lower()
    return any(m in text for m in _PERMANENT_CONNECT_FAILURES)


# A daemon waiting for its database at start-up says so at once, then at most this often.
STARTUP_WAIT_REPORT_EVERY = 30.0
# libpq (and psycopg) take a connect timeout in whole seconds, two at least: no attempt
# starts with less than this left, so that none ends more than half a second past the limit.
_LEAST_LEFT_FOR_AN_ATTEMPT = 1.5
# and none starts after a pause shorter than this (attempts a hair apart: a busy loop)
_LEAST_PAUSE = 0.1


class StartupWait:
    """A daemon's start-up before its database is reachable: back off between attempts
    and report the wait through `say(reason, attempts, waited_seconds)` at once, then
    at most every STARTUP_WAIT_REPORT_EVERY seconds; give up after `limit` seconds
    (None: never). The limit counts from the first attempt, the attempts included:
    each one's connect timeout (attempt_timeout) is cut to the time left, so a server
    that accepts and never answers is given up as soon as one that refuses."""

    def __init__(
        self,
        say: Callable[[str, int, float], None],
        limit: float | None = None,
        clock: Clock = SYSTEM,
        backoff: Backoff | None = None,
    ):
        self.say, self.limit, self.clock = say, limit, clock
        self.backoff = backoff or Backoff(base=0.5, cap=5.0)
        self.started: float | None = None
        self.said_at: float | None = None
        self.attempts = 0

    def _waited(self) -> float:
        now = self.clock.monotonic()
        if self.started is None:
            self.started = now
        return now - self.started

    def attempt_timeout(self) -> int:
        """The connect timeout of the attempt about to start (whole seconds, as libpq
        takes it): the time left, never more; the wait's clock starts at the first."""
        waited = self._waited()
        if self.limit is None:
            return connection.CONNECT_TIMEOUT
        # (2 at least, libpq's floor: again() starts no attempt with less than 1.5 s left)
        return max(2, min(connection.CONNECT_TIMEOUT, math.floor(self.limit - waited)))

    def again(self, reason: str) -> bool:
        """After a failed attempt: False when the wait is over, else pause and True."""
        waited = self._waited()
        now = self.clock.monotonic()
        self.attempts += 1
        left = None if self.limit is None else self.limit - waited
        if left is not None and left <= 0:
            return False
        if self.said_at is None or now - self.said_at >= STARTUP_WAIT_REPORT_EVERY:
            self.say(reason, self.attempts, waited)
            self.said_at = now
        delay = self.backoff.next_delay()
        if left is not None:
            if left < _LEAST_LEFT_FOR_AN_ATTEMPT + _LEAST_PAUSE:
                self.clock.sleep(left)  # no attempt fits in what is left: wait it out, then give up
                return False
            delay = min(delay, left - _LEAST_LEFT_FOR_AN_ATTEMPT)
        self.clock.sleep(delay)
        return True
