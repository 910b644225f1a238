"""The errors the shim raises, and the SQLSTATEs the stored functions raise."""

# SQLSTATEs raised by the stored functions (see docs/sql-api.md).
UNKNOWN_WORKER = "SW001"
INVALID_REQUEST = "SW002"
INVALID_CRON = "SW003"
INVALID_TIMEZONE = "SW004"
NO_SCHEDULE = "SW005"
SLOT_BUSY = "SW010"
NOT_CANCELLABLE = "SW011"
LEASE_LOST = "SW020"
BAD_FINISH_STATUS = "SW021"
BAD_RUNNER = "SW022"
BAD_TICK_INPUT = "SW030"


class ScrinaliaError(Exception):
    """Base of the shim's own errors: the CLI prints them as one line."""


class ConfigError(ScrinaliaError):
    """The database or the command line was not configured usably."""


class SchemaMismatch(ScrinaliaError):
    """The database's schema is not the one this code was written for."""
