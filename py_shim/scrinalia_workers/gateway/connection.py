"""Connections: the DSN from --dsn, DATABASE_URL or the libpq environment."""

from __future__ import annotations

import functools
import os
from datetime import UTC, datetime
from typing import Any, TypeVar

import psycopg
from psycopg.adapt import Loader
from psycopg.pq import Format

from scrinalia_workers.errors import ConfigError, DatabaseUnavailable
from scrinalia_workers.gateway.redact import redact

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
SERVER_KEEPALIVES = (
    "-c tcp_keepalives_idle=5 -c tcp_keepalives_interval=2 -c tcp_keepalives_count=3 -c tcp_user_timeout=10000"
)

# How long one connection attempt may take (a daemon's start-up wait cuts it to the time left).
CONNECT_TIMEOUT = 10

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
    dsn: str,
    *,
    autocommit: bool = True,
    application_name: str = "scrinalia-workers",
    connect_timeout: int = CONNECT_TIMEOUT,
    server_keepalives: bool = False,
) -> psycopg.Connection:
    """A connection; DatabaseUnavailable when the server cannot be reached (transient:
    the daemons retry), ConfigError when the connection string itself is unusable.
    Neither message ever carries the password."""
    params: dict[str, Any] = {
        "application_name": application_name,
        "connect_timeout": connect_timeout,
        **KEEPALIVES,
    }
    try:
        if server_keepalives:
            given = psycopg.conninfo.conninfo_to_dict(dsn).get("options") or os.environ.get("PGOPTIONS", "")
            params["options"] = f"{given} {SERVER_KEEPALIVES}".strip()
        conn = psycopg.connect(dsn, autocommit=autocommit, **params)
        # No server-side prepared statements: behind a transaction-mode pooler (PgBouncer
        # before 1.21) they collide between clients. Every call is one function call
        # whose PL/pgSQL body caches its own plans, so nothing is lost.
        conn.prepare_threshold = None
        for loader in _instant_loaders():
            conn.adapters.register_loader("timestamptz", loader)
        return conn
    except psycopg.ProgrammingError as e:  # libpq could not parse the connection string
        raise ConfigError(redact(f"invalid connection string: {str(e).strip()}", dsn)) from None
    except psycopg.OperationalError as e:
        raise DatabaseUnavailable(redact(f"cannot connect to the database: {str(e).strip()}", dsn)) from None


Row = TypeVar("Row")


def one(cur: psycopg.Cursor[Row]) -> Row:
    """The one row a statement returns (a call of a function, a count): a statement that
    returns none here means the database is not what this code was written for."""
    row = cur.fetchone()
    if row is None:
        raise LookupError("a statement that always returns one row returned none")
    return row


# --- instants Python cannot hold ----------------------------------------------------

# A timestamptz that datetime cannot hold (+-infinity, 4713 BC, year 20000: only a hand
# write puts one in a row) makes psycopg raise while it reads the row, and the rows
# read with it are lost to the reader: a runner's whole claimed batch stayed RUNNING
# with no handler until the leases ran out. Read it as the earliest or the latest
# datetime instead, which keeps its order against every other instant.
EARLIEST = datetime.min.replace(tzinfo=UTC)
LATEST = datetime.max.replace(tzinfo=UTC)


def _beyond(data, binary: bool) -> datetime:
    if binary:  # microseconds since 2000-01-01: only the sign matters here
        return EARLIEST if int.from_bytes(data, "big", signed=True) < 0 else LATEST
    text = bytes(data)
    return EARLIEST if text.startswith(b"-") or text.endswith(b" BC") else LATEST


_TIMESTAMPTZ_OID = psycopg.adapters.types["timestamptz"].oid


def now_instants_cursor(conn: psycopg.Connection) -> psycopg.Cursor[tuple[Any, ...]]:
    """A binary cursor for rows whose instants datetime always holds (the server's
    now(), instants the statement keeps in range): psycopg's own loaders, without the
    call around them (a chunk's due rows and decisions, thousands per transaction)."""
    cur = conn.cursor(binary=True)
    for fmt in (Format.TEXT, Format.BINARY):
        loader = psycopg.adapters.get_loader(_TIMESTAMPTZ_OID, fmt)
        assert loader is not None  # (psycopg loads timestamptz both ways)
        cur.adapters.register_loader("timestamptz", loader)
    return cur


@functools.cache
def _instant_loaders() -> tuple[type[Loader], ...]:
    """psycopg's own timestamptz loaders (the C ones when installed), wrapped: the
    usual values cost one more call, and only an out-of-range one is caught."""
    loaders = []
    for fmt in (Format.TEXT, Format.BINARY):
        fast = psycopg.adapters.get_loader(_TIMESTAMPTZ_OID, fmt)

        class AnyInstant(Loader):
            format = fmt
            _fast_class = fast
            _binary = fmt == Format.BINARY

            def __init__(self, oid, context=None):
                super().__init__(oid, context)
                self._fast = self._fast_class(oid, context)

            def load(self, data):
                try:
                    return self._fast.load(data)
                except psycopg.DataError:
                    return _beyond(data, self._binary)

        loaders.append(AnyInstant)
    return tuple(loaders)
