"""Every error the shim raises, and the SQLSTATEs of the stored functions it acts on.

Three kinds of trouble:

- `ConfigError` (and its subclasses) is misconfiguration that no retry will fix — a
  bad DSN, a missing grant, an old schema: the daemons print one line and exit 2.
- `DatabaseUnavailable` is transient — the server restarting, a dropped connection,
  an admin shutdown: the daemons log it and reconnect with backoff (gateway/backoff.py).
- a stored function saying no raises an `SWnnn` SQLSTATE (docs/sql-api.md): the shim
  compares the psycopg error's `sqlstate` with the constants below where it acts on one,
  and otherwise shows the message as it came.
"""

from __future__ import annotations


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
# The shim compares a psycopg error's `sqlstate` with these where it acts on one; the
# others are docs/sql-api.md's, for psql and API callers (tests/gateway/test_errors.py:
# each is one the SQL raises).

UNKNOWN_WORKER = "SW001"
NO_SCHEDULE = "SW005"
SLOT_BUSY = "SW010"
LEASE_LOST = "SW020"
INVALID_TICK_CALL = "SW030"
NOT_LOCK_HOLDER = "SW031"
NOT_THE_SCHEDULER = "SW032"


class InvalidCron(ScrinaliaError, ValueError):
    """An invalid cron expression, as the shim's cron module finds it (the SQL's twin
    raises SW003); `field` is 1-based, None for the whole expression."""

    sqlstate = "SW003"

    FIELD_NAMES = ("minute", "hour", "day-of-month", "month", "day-of-week")

    def __init__(self, message: str, field: int | None = None):
        super().__init__(message)
        self.field = field
        self.field_name = self.FIELD_NAMES[field - 1] if field else None


class InvalidTimezone(ScrinaliaError, ValueError):
    """A time zone name that is not a loadable IANA zone (the SQL raises SW004)."""

    sqlstate = "SW004"
