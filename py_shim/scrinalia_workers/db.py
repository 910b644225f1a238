"""Connections: the DSN from --dsn, DATABASE_URL or the libpq environment."""

from __future__ import annotations

import os

import psycopg

from .errors import ConfigError, DatabaseUnavailable
from .redact import redact

# Keepalives make a dead peer's backend (and so its advisory lock) go away in
# seconds rather than after the kernel's two hours.
KEEPALIVES = {
    "keepalives": 1,
    "keepalives_idle": 5,
    "keepalives_interval": 2,
    "keepalives_count": 3,
}

# The server's side of the same: the backend of a holder whose host vanished
# without closing its socket notices within seconds too, and so frees the lock.
SERVER_KEEPALIVES = ("-c tcp_keepalives_idle=5 -c tcp_keepalives_interval=2 "
                     "-c tcp_keepalives_count=3 -c tcp_user_timeout=10000")

LIBPQ_VARS = ("PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE", "PGUSER", "PGSERVICE")


def configured_dsn(dsn: str | None = None) -> str | None:
    """The DSN to use, or None when nothing at all is configured."""
    if dsn:
        return dsn
    if os.environ.get("DATABASE_URL"):
        return os.environ["DATABASE_URL"]
    if any(os.environ.get(v) for v in LIBPQ_VARS):
        return ""  # libpq reads the PG* variables itself
    return None


def require_dsn(dsn: str | None = None) -> str:
    found = configured_dsn(dsn)
    if found is None:
        raise ConfigError(
            "no database configured: pass --dsn, or set DATABASE_URL or the libpq "
            "variables (PGHOST, PGDATABASE, PGUSER, ...)"
        )
    return found


def connect(
    dsn: str, *, autocommit: bool = True, application_name: str = "scrinalia-workers",
    connect_timeout: int = 10, server_keepalives: bool = False,
) -> psycopg.Connection:
    """A connection; DatabaseUnavailable when the server cannot be reached (transient:
    the daemons retry), ConfigError when the connection string itself is unusable.
    Neither message ever carries the password."""
    extra = {}
    try:
        if server_keepalives:
            given = psycopg.conninfo.conninfo_to_dict(dsn).get("options") or os.environ.get("PGOPTIONS", "")
            extra["options"] = f"{given} {SERVER_KEEPALIVES}".strip()
        conn = psycopg.connect(
            dsn, autocommit=autocommit, application_name=application_name,
            connect_timeout=connect_timeout, **KEEPALIVES, **extra,
        )
        # No server-side prepared statements: behind a transaction-mode pooler (PgBouncer
        # before 1.21) they collide between clients. Every call is one function call
        # whose PL/pgSQL body caches its own plans, so nothing is lost.
        conn.prepare_threshold = None
        return conn
    except psycopg.ProgrammingError as e:  # libpq could not parse the connection string
        raise ConfigError(redact(f"invalid connection string: {str(e).strip()}", dsn)) from None
    except psycopg.OperationalError as e:
        raise DatabaseUnavailable(redact(f"cannot connect to the database: {str(e).strip()}", dsn)) from None
