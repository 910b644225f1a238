"""status [--watch]: the scheduler lock and health, the agenda, the queue counters."""

from __future__ import annotations

import argparse
from typing import Any

import psycopg
from psycopg.rows import dict_row

from scrinalia_workers import __version__
from scrinalia_workers.cli.commands.schedule import active_run
from scrinalia_workers.cli.common import EXIT_OK, max_attempts, one, open_db
from scrinalia_workers.cli.fmt import brief, in_zone, print_json, print_line, print_table, utc
from scrinalia_workers.gateway.checks import check_schema
from scrinalia_workers.gateway.statements import cli as sql
from scrinalia_workers.text import HIDDEN, printable


def _scheduler_line(s: dict[str, Any]) -> str:
    if s["lock_held"]:
        app = s["holder_application"]
        holder = f"application {HIDDEN}" if app is None else (app or "no application name")
        where = f" from {s['holder_client']}" if s["holder_client"] else ""
        since = utc(s["holder_backend_start"]) or HIDDEN
        line = f"lock held by pid {s['holder_pid']} (role {s['holder_role'] or HIDDEN}, {holder}{where}, connected {since})"
        if s["heartbeat_pid"] != s["holder_pid"]:
            line += " -- NOT a scheduler: it has written no heartbeat"
    else:
        line = "NO scheduler holds the lock: nothing is ticking"
    if s["last_tick_at"]:
        line += f"; last tick {utc(s['last_tick_at'])} by {s['last_tick_by'] or '-'} ({s['ticks']} ticks)"
    else:
        line += "; never ticked"
    return line


def _next_run(a: dict[str, Any]) -> tuple[str | None, str | None]:
    """(in the schedule's zone, in UTC), or what stands in for them."""
    if not a["scheduled"]:
        return "unscheduled", "unscheduled"
    if a["paused"]:
        return "paused", "-"
    if a["arm_error"]:
        return f"SET ASIDE: {brief(a['arm_error'], 60)}", utc(a["arm_retry_at"])
    if a["awaiting_arm"]:
        return "not armed yet", "-"
    return in_zone(a["next_run_at"], a["timezone"]), utc(a["next_run_at"])


def _release(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """Which release installed the database's code, beside this client's; a database
    whose code is another release's (or gone, after a rollback) is one line, exit 2."""
    try:
        with conn.transaction():
            row = one(conn.cursor(row_factory=dict_row).execute(sql.INSTALLED_RELEASE))
    except psycopg.errors.UndefinedFunction:  # (no schema at all: "not migrated", cli/app.py)
        row = {"installed": None, "schema_head": None}
    check_schema(conn)  # the release's advice when its code is not this client's
    return {"installed": row["installed"], "schema_head": row["schema_head"], "client": __version__}


def _release_line(r: dict[str, Any]) -> str:
    line = f"code installed by scrinalia-workers {printable(r['installed'])} (schema {printable(r['schema_head'])})"
    if r["installed"] != r["client"]:
        line += f"; this client is {r['client']}"
    return line


def _slot(a: dict[str, Any], most: int) -> str | None:
    """The active run, or else the failed attempt whose owed retry holds the slot."""
    run = active_run(a, most)
    if run is not None or a.get("owed_by_run_id") is None:
        return run
    return (
        f"#{a['owed_by_run_id']} {a['owed_by_status']} {a['owed_attempt'] - 1}/{most}: "
        f"owed retry {a['owed_attempt']}/{most} since {utc(a['owed_since'])} (the scheduler creates it)"
    )


def cmd_status(args: argparse.Namespace) -> int:
    if args.watch:
        from scrinalia_workers.cli.watch import watch

        open_db(args).close()  # a bad DSN or login is one line before the screen takes over
        return watch(lambda: open_db(args), args.interval)
    with open_db(args) as conn:
        release = _release(conn)
        cur = conn.cursor(row_factory=dict_row)
        agenda = cur.execute(sql.AGENDA).fetchall()
        counters = cur.execute(sql.QUEUE_COUNTERS).fetchall()
        sched = one(cur.execute(sql.SCHEDULER_STATUS))
        health = one(cur.execute(sql.SCHEDULER_HEALTH))
        surface = one(cur.execute(sql.INSTALL_SURFACE))
        most = max_attempts(conn)
    if args.json:
        print_json(
            {
                "release": release,
                "scheduler": sched,
                "health": health,
                "install": surface,
                "agenda": agenda,
                "queue_counters": counters,
            }
        )
        return EXIT_OK
    # every line below carries text read from the database: print_line escapes its newlines
    print_line(f"release: {_release_line(release)}")
    print_line(f"scheduler: {_scheduler_line(sched)}")
    print_line("health: " + ("healthy" if health["healthy"] else f"NOT HEALTHY: {health['reason']}"))
    if surface["public_can_connect"]:
        print_line(
            f"install: database {surface['dbname']} still grants CONNECT to PUBLIC: any login of the cluster can"
            " take the scheduler's lock key (docs/operate.md: REVOKE CONNECT ... FROM PUBLIC, GRANT it to the groups)"
        )
    if surface["grant_missing"]:
        print_line(f"install: {surface['grant_missing']}")
    print()
    rows = []
    for a in agenda:
        skipped = utc(a["last_skipped_at"])
        rows.append(
            [
                a["worker_name"],
                a["cron"],
                a["timezone"],
                *_next_run(a),
                "yes" if a["paused"] else ("no" if a["scheduled"] else None),
                utc(a["last_enqueued_at"]),
                skipped,
                brief(a["last_skip_reason"], 40) if skipped else None,
                _slot(a, most),
            ]
        )
    print_table(
        [
            "worker",
            "cron",
            "zone",
            "next run (zone)",
            "next run (UTC)",
            "paused",
            "last enqueued",
            "last skipped",
            "skip reason",
            "active run (or owed retry)",
        ],
        rows,
        title="agenda (when each worker runs)",
    )
    print()
    print_table(
        ["worker", "pending", "processed"],
        [[c["worker_name"], c["pending"], c["processed"]] for c in counters],
        title="queue counters (units of work, not runs)",
    )
    return EXIT_OK
