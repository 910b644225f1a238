"""The errors the shim raises, and the SQLSTATEs the stored functions raise.

Two kinds of trouble, two types: `ConfigError` (and its subclasses) is
misconfiguration that no retry will fix — a bad DSN, a missing grant, an old
schema: the daemons print one line and exit 2. `DatabaseUnavailable` is transient
— the server restarting, a dropped connection, an admin shutdown: the daemons log
it and reconnect with backoff (see backoff.py).
"""

# SQLSTATEs raised by the stored functions (see docs/sql-api.md).
UNKNOWN_WORKER = "SW001"
INVALID_CRON = "SW003"
INVALID_TIMEZONE = "SW004"
NO_SCHEDULE = "SW005"
SLOT_BUSY = "SW010"
LEASE_LOST = "SW020"


class ScrinaliaError(Exception):
    """Base of the shim's own errors: the CLI prints them as one line."""


class ConfigError(ScrinaliaError):
    """The database or the command line was not configured usably: one line, exit 2."""


class SchemaMismatch(ConfigError):
    """The database's schema is not the one this code was written for."""


class MissingPrivilege(ConfigError):
    """The login lacks a group or grant the process needs."""


class DatabaseUnavailable(ScrinaliaError):
    """A transient failure to reach the database: retry with backoff."""
