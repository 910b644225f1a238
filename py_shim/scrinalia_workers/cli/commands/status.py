"""status [--watch]: the scheduler lock and health, the agenda, the queue counters."""

from __future__ import annotations

import argparse
from datetime import timedelta
from typing import Any

import psycopg
from psycopg.rows import dict_row

from scrinalia_workers import __version__
from scrinalia_workers.cli.common import EXIT_OK, PROG, max_attempts, one, open_db
from scrinalia_workers.errors import UsageError
from scrinalia_workers.gateway.checks import check_schema
from scrinalia_workers.gateway.statements import cli as sql
from scrinalia_workers.presentation.advice import advice
from scrinalia_workers.presentation.agenda import (
    AGENDA_HEADERS,
    AGENDA_SHOWN,
    WATCH_AGENDA_SHOWN,
    max_run_time,
    next_run,
    scheduler_line,
    slot,
    totals_line,
)
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


def more_line(more: int) -> str:
    return (
        f"and {more:,} more: {PROG} status --all (every worker, by name), status --limit N, "
        f"{PROG} schedule get WORKER, or the web view's agenda (paged)"
    )


def cmd_status(args: argparse.Namespace) -> int:
    if args.all and (args.watch or args.limit is not None):
        raise UsageError("--all prints every worker: give it without --watch and --limit")
    if args.watch:
        from scrinalia_workers.cli.watch import watch

        open_db(args).close()  # a bad DSN or login is one line before the screen takes over
        return watch(lambda: open_db(args), args.interval, agenda_rows=args.limit or WATCH_AGENDA_SHOWN)
    limit = args.limit or AGENDA_SHOWN
    with open_db(args) as conn:
        release = _release(conn)
        cur = conn.cursor(row_factory=dict_row)
        totals = one(cur.execute(sql.AGENDA_TOTALS))
        queue_totals = one(cur.execute(sql.QUEUE_TOTALS))
        if args.all:
            agenda = cur.execute(sql.AGENDA).fetchall()
            counters = cur.execute(sql.QUEUE_COUNTERS).fetchall()
        else:
            agenda = cur.execute(sql.AGENDA_FOCUS, {"n": limit}).fetchall()
            counters = cur.execute(sql.BUSIEST_QUEUES, {"n": limit}).fetchall()
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
                "agenda_totals": totals,
                "agenda": agenda,
                # the workers not in "agenda" (status --all: none)
                "agenda_more": max(totals["workers"] - len(agenda), 0),
                "queue_totals": queue_totals,
                "queue_counters": counters,
                "queue_counters_more": max(totals["workers"] - len(counters), 0),
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
    print_line(f"agenda: {totals_line(totals)}")
    print()
    more = max(totals["workers"] - len(agenda), 0)
    focused = not args.all
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
                *([a["focus"]] if focused else []),
            ]
        )
    shown = f": the first {len(agenda):,} of {totals['workers']:,}, what needs an operator first" if more else ""
    print_table(
        [*AGENDA_HEADERS, *(["concern"] if focused else [])],
        rows,
        title=f"agenda (when each worker runs{shown})",
    )
    if more:
        print_line(more_line(more))
    print()
    more = max(totals["workers"] - len(counters), 0)
    busiest = f"the {len(counters):,} busiest of {totals['workers']:,} workers; " if more else ""
    print_table(
        ["worker", "pending", "processed"],
        [[c["worker_name"], c["pending"], c["processed"]] for c in counters],
        title=f"queue counters (units of work, not runs: {busiest}{queue_totals['workers_with_units']:,} worker(s)"
        f" with units, {queue_totals['pending']:,} pending, {queue_totals['processed']:,} processed)",
    )
    if more:
        print_line(f"and {more:,} more: {PROG} status --all")
    return EXIT_OK
