"""Apply the migrations (yoyo) and then the code in sql/ (replaced whole each time).

The tables are versioned by migrations/; the functions, views and grants in sql/ are
dropped and re-created in one transaction after them, so that an upgrade never
leaves a function of the previous release behind.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from urllib.parse import quote

import psycopg
from yoyo import get_backend, read_migrations

from . import paths
from .db import connect

log = logging.getLogger("scrinalia_workers.migrate")

# Serialises concurrent migrates of one database (two deploys starting at once).
MIGRATE_LOCK_KEY = 7305764011424514050


def _yoyo_uri(dsn: str) -> str:
    """yoyo wants a URI with its driver name; keyword DSNs become one too."""
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    user = quote(info.pop("user", "") or "", safe="")
    password = info.pop("password", None)
    host = info.pop("host", "") or ""
    port = info.pop("port", "") or ""
    dbname = info.pop("dbname", "") or ""
    auth = user + (":" + quote(password, safe="") if password else "")
    netloc = (auth + "@" if auth else "")
    query = {}
    if host.startswith("/"):
        query["host"] = host
        host = ""
    netloc += host + (":" + port if port else "")
    query.update({k: v for k, v in info.items() if v is not None})
    qs = "&".join(f"{k}={quote(str(v), safe='/')}" for k, v in query.items())
    return f"postgresql+psycopg://{netloc}/{quote(dbname, safe='')}" + ("?" + qs if qs else "")


def _backend(dsn: str):
    return get_backend(_yoyo_uri(dsn))


def apply_code(conn: psycopg.Connection) -> None:
    with conn.transaction():
        for f in paths.sql_files():
            conn.execute(f.read_text())


@contextmanager
def _locked_backend(dsn: str):
    """A yoyo backend, with concurrent migrates of this database kept out."""
    with connect(dsn, application_name="scrinalia-workers migrate") as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATE_LOCK_KEY,))
        backend = _backend(dsn)
        try:
            with backend.lock():
                yield conn, backend, read_migrations(str(paths.migrations_dir()))
        finally:
            backend.connection.close()


def migrate(dsn: str) -> list[str]:
    """Bring the database to the head; returns the ids of the migrations applied."""
    with _locked_backend(dsn) as (conn, backend, migrations):
        pending = backend.to_apply(migrations)
        backend.apply_migrations(pending)
        apply_code(conn)
    applied = [m.id for m in pending]
    for mid in applied:
        log.info("applied migration %s", mid)
    return applied


def rollback(dsn: str, count: int | None = None) -> list[str]:
    """Roll back the last `count` migrations (all when None)."""
    with _locked_backend(dsn) as (conn, backend, migrations):
        todo = backend.to_rollback(migrations)
        if count is not None:
            todo = todo[:count]
        backend.rollback_migrations(todo)
    return [m.id for m in todo]


def applied_migrations(dsn: str) -> list[str]:
    migrations = read_migrations(str(paths.migrations_dir()))
    backend = _backend(dsn)
    try:
        return [m.id for m in migrations if m.hash in backend.get_applied_migration_hashes()]
    finally:
        backend.connection.close()
