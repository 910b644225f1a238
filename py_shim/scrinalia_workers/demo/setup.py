"""The demo's objects in a database: the guard, the seed and the tidy-up.

The demo (and compose's `demo-seed`) uses a database only when it is empty (no
scrinalia schema, or one without workers) or holds nothing but the demo's own
workers, recognised by the DEMO_TAG their description starts with. Runs, schedules,
settings and units all reference a worker, so "every worker is the demo's" means
"everything is the demo's". Anything else is refused, naming what is there.
"""

from __future__ import annotations

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from scrinalia_workers.admin.catalogue import DEMO_TAG
from scrinalia_workers.demo.handlers import DEMO_OPTIONS, WORKERS
from scrinalia_workers.errors import NotADemoDatabase
from scrinalia_workers.gateway.connection import one
from scrinalia_workers.gateway.statements import demo as sql

WHO = "demo"


def _has_catalogue(conn: psycopg.Connection) -> bool:
    return bool(one(conn.execute(sql.HAS_CATALOGUE))[0])


def foreign_workers(conn: psycopg.Connection) -> list[str]:
    """The workers in the catalogue that the demo did not register."""
    if not _has_catalogue(conn):
        return []
    return [
        r[0]
        for r in conn.execute(
            sql.FOREIGN_WORKERS,
            (DEMO_TAG, DEMO_TAG),
        ).fetchall()
    ]


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
    return done


def disable(conn: psycopg.Connection) -> tuple[list[str], list[int]]:
    """Pauses the demo's enabled schedules and cancels its queued runs.

    Returns (paused workers, cancelled run ids). Touches only demo-tagged workers.
    """
    paused = [r[0] for r in conn.execute(sql.DEMO_ENABLED_SCHEDULES, (DEMO_TAG, DEMO_TAG)).fetchall()]
    for name in paused:
        conn.execute(sql.PAUSE_SCHEDULE, (name, WHO))
    queued = [r[0] for r in conn.execute(sql.DEMO_QUEUED_RUNS, (DEMO_TAG, DEMO_TAG)).fetchall()]
    for run_id in queued:
        conn.execute(sql.CANCEL_RUN, (run_id, WHO))
    return paused, queued
