"""Every error the shim raises, and a class for every SQLSTATE the stored functions raise.

Three kinds of trouble:

- `ConfigError` (and its subclasses) is misconfiguration that no retry will fix — a
  bad DSN, a missing grant, an old schema: the daemons print one line and exit 2.
- `DatabaseUnavailable` is transient — the server restarting, a dropped connection,
  an admin shutdown: the daemons log it and reconnect with backoff (gateway/backoff.py).
- `Refusal` is a stored function saying no (an `SWnnn` SQLSTATE, see docs/sql-api.md):
  `refusal()` turns a psycopg error carrying one into its class here.

tests/gateway/test_errors.py checks that every SQLSTATE sql/ raises has its class.
"""

from __future__ import annotations

from typing import ClassVar

import psycopg


class ScrinaliaError(Exception):
    """Base of the shim's own errors: the CLI prints them as one line."""


# --- misconfiguration: one line, exit 2 -----------------------------------------------


class ConfigError(ScrinaliaError):
    """The database or the command line was not configured usably: one line, exit 2."""


class SchemaMismatch(ConfigError):
    """The database's schema is not the one this code was written for."""


class MissingPrivilege(ConfigError):
    """The login lacks a group or grant the process needs."""


class UnsafeConnection(ConfigError):
    """The scheduler's lock connection cannot hold a session lock (a transaction-mode pooler)."""


class NotADemoDatabase(ConfigError):
    """The database holds data the demo did not create."""


class UsageError(ScrinaliaError):
    """Bad command-line input (argparse's own errors included)."""


# --- transient: retried with backoff --------------------------------------------------


class DatabaseUnavailable(ScrinaliaError):
    """A transient failure to reach the database: retry with backoff."""


class LockLost(Exception):
    """This process no longer holds the scheduler lock: stop ticking at once.

    Not a ScrinaliaError: it is control flow inside the scheduler, never shown to a user."""


# --- admin work -----------------------------------------------------------------------


class MigrateLockBusy(ScrinaliaError):
    """Another session holds the migrate lock for longer than --lock-timeout."""


class RollbackRefused(ScrinaliaError):
    """A rollback would destroy data: nothing was rolled back."""


class InputError(ScrinaliaError):
    """A file an operator handed us that cannot be read as asked: names the file and why."""


class CatalogueError(ScrinaliaError):
    """A catalogue file that cannot be registered: names the file and the part."""


# --- refusals of the stored functions (SQLSTATE SWnnn) --------------------------------


class Refusal(ScrinaliaError):
    """A stored function refused the call; `sqlstate` says which rule, the message why."""

    sqlstate: ClassVar[str]

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.hint = hint


class UnknownWorker(Refusal):
    """No such worker in the catalogue."""

    sqlstate = "SW001"


class InvalidRequest(Refusal):
    """A request, option, argument or setting that breaks the catalogue's or the API's rules."""

    sqlstate = "SW002"


class InvalidCron(Refusal, ValueError):
    """An invalid cron expression; `field` is 1-based, None for the whole expression."""

    sqlstate = "SW003"

    FIELD_NAMES = ("minute", "hour", "day-of-month", "month", "day-of-week")

    def __init__(self, message: str, field: int | None = None, hint: str | None = None):
        super().__init__(message, hint)
        self.field = field
        self.field_name = self.FIELD_NAMES[field - 1] if field else None


class InvalidTimezone(Refusal, ValueError):
    """A time zone name that is not a loadable IANA zone."""

    sqlstate = "SW004"


class NoSchedule(Refusal):
    """The worker has no schedule."""

    sqlstate = "SW005"


class SlotBusy(Refusal):
    """The worker's one slot is taken (a queued or running run, or an owed retry): HTTP 409."""

    sqlstate = "SW010"


class NotCancellable(Refusal):
    """Only a QUEUED run can be cancelled."""

    sqlstate = "SW011"


class LeaseLost(Refusal):
    """The runner no longer holds this run's lease: stop working on it, do not report it."""

    sqlstate = "SW020"


class InvalidReport(Refusal):
    """A runner reported a status it may not report."""

    sqlstate = "SW021"


class InvalidRunnerCall(Refusal):
    """A runner's call is malformed: its id, its lease, its batch or its arrays."""

    sqlstate = "SW022"


class InvalidTickCall(Refusal):
    """A scheduler's call is malformed: its limit or its arrays."""

    sqlstate = "SW030"


class NotLockHolder(Refusal):
    """The caller does not hold the scheduler lock: it must stop ticking and stand by."""

    sqlstate = "SW031"


class NotTheScheduler(Refusal):
    """A scheduler function called by a session that is not the scheduler: neither the
    holder of the scheduler lock nor the work session its heartbeat names."""

    sqlstate = "SW032"


REFUSALS: dict[str, type[Refusal]] = {
    cls.sqlstate: cls
    for cls in (
        UnknownWorker,
        InvalidRequest,
        InvalidCron,
        InvalidTimezone,
        NoSchedule,
        SlotBusy,
        NotCancellable,
        LeaseLost,
        InvalidReport,
        InvalidRunnerCall,
        InvalidTickCall,
        NotLockHolder,
        NotTheScheduler,
    )
}

# The SQLSTATEs by name, for code that compares a psycopg error's `sqlstate`.
UNKNOWN_WORKER = UnknownWorker.sqlstate
INVALID_REQUEST = InvalidRequest.sqlstate
INVALID_CRON = InvalidCron.sqlstate
INVALID_TIMEZONE = InvalidTimezone.sqlstate
NO_SCHEDULE = NoSchedule.sqlstate
SLOT_BUSY = SlotBusy.sqlstate
NOT_CANCELLABLE = NotCancellable.sqlstate
LEASE_LOST = LeaseLost.sqlstate
INVALID_REPORT = InvalidReport.sqlstate
INVALID_RUNNER_CALL = InvalidRunnerCall.sqlstate
INVALID_TICK_CALL = InvalidTickCall.sqlstate
NOT_LOCK_HOLDER = NotLockHolder.sqlstate
NOT_THE_SCHEDULER = NotTheScheduler.sqlstate


def refusal(e: psycopg.Error) -> Refusal | None:
    """The refusal a stored function raised as `e`, or None when `e` is no SW error."""
    cls = REFUSALS.get(e.sqlstate or "")
    if cls is None:
        return None
    diag = e.diag
    found = cls(diag.message_primary or str(e), hint=diag.message_hint)
    found.__cause__ = e
    return found
