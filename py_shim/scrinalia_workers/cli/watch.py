"""What an operator looks at: a live status screen and one worker's attempts as a timeline.

    scrinalia-workers status --watch [--interval SECONDS]
    scrinalia-workers runs WORKER --timeline

Both read only what a login in scrinalia_reader may read (the views,
scheduler_health() and worker_timeline()), fit an 80-column terminal, and print
instants in UTC with a Z.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from datetime import datetime
from typing import Any, TextIO

import psycopg
from psycopg.rows import dict_row

from scrinalia_workers.cli.common import PROG, one
from scrinalia_workers.cli.terminal import write_control
from scrinalia_workers.clock import SYSTEM, Clock
from scrinalia_workers.gateway.backoff import Backoff, is_transient
from scrinalia_workers.gateway.statements import cli as sql
from scrinalia_workers.logs import one_line
from scrinalia_workers.presentation.agenda import WATCH_AGENDA_SHOWN, span, totals_line
from scrinalia_workers.presentation.fmt import brief, cell
from scrinalia_workers.presentation.fmt import utc as utc_or_none
from scrinalia_workers.text import for_terminal

CLEAR = "\x1b[H\x1b[2J"


def utc(ts: datetime | None) -> str:
    """An instant as the CLI prints it, '-' for none."""
    return utc_or_none(ts) or "-"


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def _row(cells: list[str], widths: list[int]) -> str:
    return " ".join(_fit(c, w).ljust(w) for c, w in zip(cells, widths)).rstrip()


def render(
    conn: psycopg.Connection[Any], width: int = 80, failures: int = 5, agenda_rows: int = WATCH_AGENDA_SHOWN
) -> str:
    """One screen: the scheduler's health, the agenda's totals and its first
    `agenda_rows` workers (what needs an operator first, as status prints them) with the
    time to each next run, the active runs with their lease, and the latest failures."""
    cur = conn.cursor(row_factory=dict_row)
    now = one(cur.execute(sql.NOW))["now"]
    h = one(cur.execute(sql.WATCH_HEALTH))
    totals = one(cur.execute(sql.AGENDA_TOTALS))
    agenda = cur.execute(sql.WATCH_AGENDA, {"n": agenda_rows}).fetchall()
    active = cur.execute(sql.ACTIVE_RUNS).fetchall()
    failed = cur.execute(sql.LATEST_FAILURES, (failures,)).fetchall()

    out = [_fit(f"scrinalia-workers  {utc(now)}  (Ctrl-C to quit)", width)]
    if h["healthy"]:
        out.append(
            _fit(f"scheduler: healthy (holder {h['holder_role']}, heartbeat {span(h['heartbeat_age'])} ago)", width)
        )
    else:
        out.append(_fit(f"scheduler: NOT HEALTHY: {brief(h['reason'])}", width))
    out.append("")
    more = max(totals["workers"] - len(agenda), 0)
    out.append(_fit(f"AGENDA  {totals_line(totals)}", width))
    widths = [16, 14, 20, max(width - 16 - 14 - 20 - 3, 10)]
    out.append(_row(["worker", "next in", "next run (UTC)", "state"], widths))
    for a in agenda:
        if not a["scheduled"]:
            nxt, when, state = "-", "-", "unscheduled"
        elif a["paused"]:
            nxt, when, state = "-", "-", "paused"
        elif a["arm_error"]:
            nxt, when, state = "-", "-", f"SET ASIDE: {brief(a['arm_error'])}"
        elif a["awaiting_arm"]:
            nxt, when, state = "-", "-", "awaiting arm"
        else:
            nxt, when = span(a["next_run_at"] - now), utc(a["next_run_at"])
            state = f"{a['cron']} {a['timezone']}"
        if a["active_run_id"]:
            state = f"#{a['active_run_id']} {a['active_status']} | " + state
        out.append(_row([a["worker_name"], nxt, when, state], widths))
    if more:
        out.append(f"  and {more:,} more: {PROG} status --all")
    out.append("")
    out.append("ACTIVE RUNS")
    if not active:
        out.append("  none")
    widths = [8, 16, 8, 9, max(width - 8 - 16 - 8 - 9 - 4, 10)]
    if active:
        out.append(_row(["run", "worker", "status", "attempt", "lease / wait"], widths))
    for r in active:
        if r["status"] == "RUNNING":
            lease = f"{r['lease_owner']}, lease {span(r['lease_expires_at'] - now) if r['lease_expires_at'] else '-'}"
        elif r["not_before"] and r["not_before"] > now:
            lease = f"retry in {span(r['not_before'] - now)}"
        else:
            lease = f"waiting {span(now - r['created_at'])} for a runner"
        out.append(_row([f"#{r['run_id']}", r["worker_name"], r["status"], r["attempt_label"], lease], widths))
    out.append("")
    out.append("LATEST FAILURES")
    if not failed:
        out.append("  none")
    widths = [7, 14, 11, 4, max(width - 7 - 14 - 11 - 4 - 4, 10)]
    for r in failed:
        ago = span(now - r["finished_at"]) + " ago" if r["finished_at"] else "-"
        out.append(
            _row(
                [
                    f"#{r['run_id']}",
                    r["worker_name"],
                    r["status"],
                    r["attempt_label"],
                    f"{ago}: {brief(r['error'] or '')}",
                ],
                widths,
            )
        )
    # (a worker's name, a lease owner, a role: text read from the database, escaped as a cell)
    return "\n".join(_fit(cell(line), width) for line in out)


def watch(
    connect: Callable[[], psycopg.Connection[Any]],
    interval: float,
    out: TextIO = sys.stdout,
    width: int | None = None,
    clock: Clock = SYSTEM,
    agenda_rows: int = WATCH_AGENDA_SHOWN,
) -> int:
    """Refreshes render() in place every `interval` seconds until Ctrl-C; a lost
    connection is shown on the screen and retried, never a traceback. `clock` paces
    the refreshes (a test's FakeClock makes them immediate)."""
    conn = None
    retry = Backoff(base=0.5, cap=max(interval, 5.0))
    try:
        while True:
            cols = width or shutil.get_terminal_size((80, 24)).columns
            try:
                if conn is None or conn.closed:
                    conn = connect()
                screen = render(conn, width=cols, agenda_rows=agenda_rows)
                retry.reset()
                delay = interval
            except Exception as e:  # noqa: BLE001 - shown on the screen, retried
                if conn is not None:
                    conn.close()
                conn = None
                if not is_transient(e) and not isinstance(e, psycopg.Error):
                    raise
                delay = retry.next_delay()
                screen = _fit(
                    f"scrinalia-workers: database unavailable ({one_line(e)}); retrying in {delay:.1f} s", cols
                )
            # one write: the clear of our own, then the screen with nothing in it that acts
            write_control(out, CLEAR + for_terminal(screen) + "\n")
            out.flush()
            clock.sleep(delay)
    except KeyboardInterrupt:
        out.write("\n")
        return 0
    finally:
        if conn is not None:
            conn.close()


def timeline(conn: psycopg.Connection[Any], worker: str, periods: int = 10, width: int = 80) -> str:
    """One worker's scheduled periods, newest first, each with its attempts: outcome,
    when it started relative to the period, the backoff before it, and the error."""
    cur = conn.cursor(row_factory=dict_row)
    rows = cur.execute(sql.WORKER_TIMELINE, {"w": worker, "periods": periods}).fetchall()
    if not rows:
        return f"{worker}: no scheduled runs yet"
    out = [f"{worker}: the last {periods} scheduled periods, newest first"]
    current = None
    prev_end = None
    for r in rows:
        if r["scheduled_for"] != current:
            current = r["scheduled_for"]
            prev_end = None
            out.append("")
            # (the tick's answer, on the period's attempt 1)
            caught_up = " catch-up: one run for the periods missed" if r["catch_up"] else ""
            out.append(f"period {utc(current)}{caught_up}")
        started = span(r["started_at"] - current) + " after the period" if r["started_at"] else "not started"
        backoff = ""
        if r["retry_of"] and prev_end and r["not_before"]:
            backoff = f", backoff {span(r['not_before'] - prev_end)}"
        line = f"  {r['attempt_label']}  #{r['run_id']:<6} {r['status']:<11} {started}{backoff}" + (
            f", took {span(r['duration'])}" if r["duration"] else ""
        )
        out.append(_fit(line, width))
        if r["error"]:
            out.append(_fit(f"           {brief(r['error'])}", width))
        if r.get("rerun_by"):  # re-run by hand (rerun()): MANUAL runs, not in the timeline
            out.append(_fit("           re-run by " + ", ".join(f"#{i}" for i in r["rerun_by"]), width))
        prev_end = r["finished_at"]
    return "\n".join(cell(line) for line in out)
