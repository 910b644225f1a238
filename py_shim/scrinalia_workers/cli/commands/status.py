"""status [--watch]: the scheduler lock and health, the agenda, the queue counters."""

from __future__ import annotations

import argparse
from datetime import timedelta
from typing import Any

import psycopg
from psycopg.rows import dict_row

from scrinalia_workers import __version__
from scrinalia_workers.cli.common import EXIT_OK, max_attempts, one, open_db
from scrinalia_workers.gateway.checks import check_schema
from scrinalia_workers.gateway.statements import cli as sql
from scrinalia_workers.presentation.advice import advice
from scrinalia_workers.presentation.agenda import AGENDA_HEADERS, max_run_time, next_run, scheduler_line, slot
from scrinalia_workers.presentation.fmt import brief, print_json, print_line, print_table, utc
from scrinalia_workers.text import printable


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


# How many alerts status prints (the oldest first); the rest are counted, and
# scrinalia.current_alerts() or the web view has them all.
ALERTS_SHOWN = 20


def _alert_lines(alerts: list[dict[str, Any]]) -> list[str]:
    if not alerts:
        return ["alerts: none, nothing to do"]
    lines = [f"alerts ({len(alerts) if len(alerts) <= ALERTS_SHOWN else f'the oldest {ALERTS_SHOWN}'}):"]
    for a in alerts[:ALERTS_SHOWN]:
        lines.append(f"  {a['kind']} since {utc(a['since']) or '-'}: {brief(a['message'], 400)}")
        lines.append(f"    what to do: {advice(a['kind'])}")
    if len(alerts) > ALERTS_SHOWN:
        lines.append("  and more: SELECT * FROM scrinalia.current_alerts()")
    return lines


def _retention_line(r: dict[str, Any]) -> str:
    """The retention in force, its last sweep and the one under way (all numbers and instants)."""
    keep = r["retention"]
    if keep is None:
        return "off (scrinalia.set_run_retention, the owner's or an operator's, turns it on)"
    line = f"{keep.days} days" if keep == timedelta(days=keep.days) else str(keep)
    if r["pruned_at"] is None:
        line += "; never pruned yet"
    else:
        line += (
            f"; last pruned {utc(r['pruned_at'])}: {r['pruned_runs']} run(s) finished before {utc(r['pruned_cutoff'])}"
        )
    if r["sweep_cutoff"] is not None:
        line += f"; pruning since {utc(r['sweep_started_at'])}: {r['sweep_removed']} run(s) so far"
    return line


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
        alerts = cur.execute(sql.ALERTS, {"n": ALERTS_SHOWN + 1}).fetchall()
        surface = one(cur.execute(sql.INSTALL_SURFACE))
        retention = one(cur.execute(sql.RETENTION_STATUS))
        most = max_attempts(conn)
    if args.json:
        print_json(
            {
                "release": release,
                "scheduler": sched,
                "health": health,
                "alerts": alerts[:ALERTS_SHOWN],
                "alerts_cut": len(alerts) > ALERTS_SHOWN,
                "install": surface,
                "retention": retention,
                "agenda": agenda,
                "queue_counters": counters,
            }
        )
        return EXIT_OK
    # every line below carries text read from the database: print_line escapes its newlines
    print_line(f"release: {_release_line(release)}")
    print_line(f"scheduler: {scheduler_line(sched)}")
    print_line("health: " + ("healthy" if health["healthy"] else f"NOT HEALTHY: {health['reason']}"))
    if surface["public_can_connect"]:
        print_line(
            f"install: database {surface['dbname']} still grants CONNECT to PUBLIC: any login of the cluster can"
            " take the scheduler's lock key (docs/operate.md: REVOKE CONNECT ... FROM PUBLIC, GRANT it to the groups)"
        )
    if surface["grant_missing"]:
        print_line(f"install: {surface['grant_missing']}")
    print_line(f"retention: {_retention_line(retention)}")
    for line in _alert_lines(alerts):
        print_line(line)
    print()
    rows = []
    for a in agenda:
        skipped = utc(a["last_skipped_at"])
        rows.append(
            [
                a["worker_name"],
                a["cron"],
                a["timezone"],
                *next_run(a),
                "yes" if a["paused"] else ("no" if a["scheduled"] else None),
                utc(a["last_enqueued_at"]),
                skipped,
                brief(a["last_skip_reason"], 40) if skipped else None,
                max_run_time(a),
                slot(a, most),
            ]
        )
    print_table(
        AGENDA_HEADERS,
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
