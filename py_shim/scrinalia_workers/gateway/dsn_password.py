"""A daemon's --dsn that carries a password: every local user reads a process's command
line (/proc/<pid>/cmdline, ps). The daemons say so once at start-up, never the
password itself, and go on (the operator may have nothing better at hand today)."""

from __future__ import annotations

import re

import psycopg

from scrinalia_workers.logs import EventLog

# what a DSN libpq cannot parse may still hold a password: key=value, or a URI's user:password@
_LOOKS_LIKE_A_PASSWORD = re.compile(r"(?i)(\bpassword\s*=\s*\S)|(^[a-z][a-z0-9+.-]*://[^/@?#]*:[^/@?#]+@)")

ADVICE = (
    "--dsn carries a password, which every local user can read in this process's command line "
    "(/proc/<pid>/cmdline, ps): pass it with PGPASSWORD, a passfile (~/.pgpass or PGPASSFILE), a service "
    "file (PGSERVICE), or the whole DSN in DATABASE_URL, as compose does (docs/operate.md, Passwords)"
)


def carries_password(dsn: str | None) -> bool:
    if not dsn:
        return False
    try:
        return bool(psycopg.conninfo.conninfo_to_dict(dsn).get("password"))
    except psycopg.ProgrammingError:
        return _LOOKS_LIKE_A_PASSWORD.search(dsn) is not None


def warn_if_password_in_argv(dsn_option: str | None, log: EventLog) -> None:
    """One warning when the --dsn given on the command line carries a password."""
    if carries_password(dsn_option):
        log("password on the command line", level="warning", reason=ADVICE)
