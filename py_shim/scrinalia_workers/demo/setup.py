"""The demo's objects in a database: the guard, the seed and the tidy-up.

The demo (and compose's `demo-seed`) uses a database only when it is empty (no
scrinalia schema, or one without workers) or holds nothing but the demo's own
workers. Which workers are its own it knows from a record it keeps in the database
(scrinalia.settings' DEMO_WORKERS row: the names it registered), never from a text
anybody can write (a description). Runs, schedules, settings and units all reference a
worker, so "every worker is the demo's" means "everything is the demo's". Anything
else is refused, naming what is there.
"""

from __future__ import annotations

import json

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from scrinalia_workers.demo.handlers import DEMO_OPTIONS, WORKERS
from scrinalia_workers.errors import NotADemoDatabase
from scrinalia_workers.gateway.connection import one
from scrinalia_workers.gateway.statements import demo as sql

WHO = "demo"
# shown at the start of each demo worker's description, for a person reading the catalogue
DEMO_TAG = "[scrinalia demo]"


def _has_catalogue(conn: psycopg.Connection) -> bool:
    return bool(one(conn.execute(sql.HAS_CATALOGUE))[0])


def recorded_workers(conn: psycopg.Connection) -> list[str]:
    """The workers the demo registered in this database, from its own record."""
    if not one(conn.execute(sql.HAS_SETTINGS))[0]:
        return []
    row = conn.execute(sql.DEMO_RECORD).fetchone()
    names = json.loads(row[0]) if row else []
    return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []


def foreign_workers(conn: psycopg.Connection) -> list[str]:
    """The workers in the catalogue that the demo did not register."""
    if not _has_catalogue(conn):
        return []
    own = set(recorded_workers(conn))
    return [r[0] for r in conn.execute(sql.WORKER_NAMES).fetchall() if r[0] not in own]


def refuse_unless_demo_only(conn: psycopg.Connection) -> None:
    found = foreign_workers(conn)
    if found:
        names = ", ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
        raise NotADemoDatabase(
            f"this database holds {len(found)} worker(s) the demo did not create ({names}): the demo "
            "uses only an empty database or one holding nothing but its own demo-* workers; "
            "point --dsn at an empty database, or unset DATABASE_URL and the PG* variables "
            "for a throwaway one"
        )


def seed(conn: psycopg.Connection) -> list[tuple[str, str, str, bool]]:
    """Registers the demo workers and their schedules, idempotently, in one transaction.

    Returns (worker, cron, what, schedule_changed) per demo worker. A schedule that
    is already as the demo wants it is left alone (not re-armed).
    """
    done = []
    with conn.transaction():
        # no one registers a worker between the guard and the seed
        conn.execute(sql.LOCK_CATALOGUE)
        refuse_unless_demo_only(conn)
        cur = conn.cursor(row_factory=dict_row)
        for name, (cron, request, what) in WORKERS.items():
            cur.execute(
                sql.REGISTER_DEMO_WORKER,
                (name, Jsonb(DEMO_OPTIONS), f"{DEMO_TAG} {what}"),
            )
            s = cur.execute(sql.SCHEDULE_OF, (name,)).fetchone()
            changed = s != {"cron": cron, "timezone": "UTC", "request": request, "enabled": True}
            if changed:
                cur.execute(sql.PUT_DEMO_SCHEDULE, (name, cron, Jsonb(request), WHO))
            done.append((name, cron, what, changed))
        # the record is what the demo trusts later, not the description anybody can write
        conn.execute(sql.RECORD_DEMO_WORKERS, (json.dumps(sorted(set(recorded_workers(conn)) | set(WORKERS))),))
    return done


def disable(conn: psycopg.Connection) -> tuple[list[str], list[int]]:
    """Pauses the demo's enabled schedules and cancels its queued runs.

    Returns (paused workers, cancelled run ids). Touches only the workers of its record.
    """
    own = recorded_workers(conn) if _has_catalogue(conn) else []
    if not own:
        return [], []
    paused = [r[0] for r in conn.execute(sql.DEMO_ENABLED_SCHEDULES, (own,)).fetchall()]
    for name in paused:
        conn.execute(sql.PAUSE_SCHEDULE, (name, WHO))
    queued = [r[0] for r in conn.execute(sql.DEMO_QUEUED_RUNS, (own,)).fetchall()]
    for run_id in queued:
        conn.execute(sql.CANCEL_RUN, (run_id, WHO))
    return paused, queued
