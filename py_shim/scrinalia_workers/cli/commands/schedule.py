"""schedule get|put|delete|pause|resume|import|next: a worker's schedule, one function per action."""

from __future__ import annotations

import argparse
import json
from datetime import timedelta
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from scrinalia_workers import errors
from scrinalia_workers.cli.common import EXIT_OK, max_attempts, one, open_db, parse_json_object, who
from scrinalia_workers.cli.files import read_schedule_file
from scrinalia_workers.gateway.statements import cli as sql
from scrinalia_workers.presentation.agenda import active_run, last_skipped_words, next_run_words
from scrinalia_workers.presentation.fmt import cell, print_fields, print_json, print_table, utc


def _fields(a: dict[str, Any], most: int) -> list[tuple[str, Any]]:
    return [
        ("worker", a["worker_name"]),
        ("cron", a["cron"]),
        ("timezone", a["timezone"]),
        ("enabled", "no (paused)" if a["paused"] else "yes"),
        ("next run", next_run_words(a)),
        ("request", json.dumps(a["request"], ensure_ascii=False)),
        ("last enqueued", utc(a["last_enqueued_at"]) and f"{utc(a['last_enqueued_at'])} (run #{a['last_run_id']})"),
        ("last skipped", last_skipped_words(a)),
        ("active run", active_run(a, most)),
        ("updated", a["updated_at"] and f"{utc(a['updated_at'])} by {a['updated_by'] or '-'}"),
    ]


def _show(conn: psycopg.Connection[Any], worker: str, as_json: bool) -> None:
    a = conn.cursor(row_factory=dict_row).execute(sql.WORKER_AGENDA, (worker,)).fetchone()
    if a is None:
        raise errors.ScrinaliaError(f"[{errors.UNKNOWN_WORKER}] unknown worker {worker!r}")
    if not a["scheduled"]:
        raise errors.ScrinaliaError(f"[{errors.NO_SCHEDULE}] worker {worker!r} has no schedule")
    if as_json:
        print_json(a)
    else:
        print_fields(_fields(a, max_attempts(conn)))


def _changed(conn: psycopg.Connection[Any], args: argparse.Namespace, verb: str) -> int:
    """After a write: what was done, then the schedule as it now is."""
    if not args.json:
        print(f"schedule of {args.worker} {verb}")
    _show(conn, args.worker, args.json)
    return EXIT_OK


def cmd_get(args: argparse.Namespace) -> int:
    with open_db(args) as conn:
        _show(conn, args.worker, args.json)
    return EXIT_OK


def cmd_put(args: argparse.Namespace) -> int:
    from scrinalia_workers import cron

    # fast, local, field-naming errors before connecting
    expr = cron.validate(args.cron)
    if args.timezone is not None:
        cron.validate_timezone(args.timezone)
    request = parse_json_object(args.request, "--request")
    with open_db(args) as conn:
        conn.execute(sql.PUT_SCHEDULE, (args.worker, expr, args.timezone, Jsonb(request), not args.disabled, who()))
        return _changed(conn, args, "saved")


def cmd_delete(args: argparse.Namespace) -> int:
    with open_db(args) as conn:
        conn.execute(sql.DELETE_SCHEDULE, (args.worker,))
    if args.json:
        print_json({"deleted": args.worker})
    else:
        print(f"deleted the schedule of {args.worker}")
    return EXIT_OK


def cmd_pause(args: argparse.Namespace) -> int:
    with open_db(args) as conn:
        conn.execute(sql.SET_SCHEDULE_ENABLED, (args.worker, False, who()))
        return _changed(conn, args, "paused")


def cmd_resume(args: argparse.Namespace) -> int:
    with open_db(args) as conn:
        conn.execute(sql.SET_SCHEDULE_ENABLED, (args.worker, True, who()))
        return _changed(conn, args, "resumed (re-armed from the cron: paused periods are not caught up)")


def cmd_import(args: argparse.Namespace) -> int:
    label, schedules = read_schedule_file(args.file)
    with open_db(args) as conn:
        # --dry-run: the same call, rolled back (so no NOTIFY either)
        with conn.transaction(force_rollback=args.dry_run):
            try:
                created, replaced = one(conn.execute(sql.PUT_SCHEDULES, (schedules, who())))
            except psycopg.Error as e:
                e.add_note(label)
                raise
    if args.json:
        print_json({"file": label, "created": created, "replaced": replaced, "dry_run": args.dry_run})
    elif args.dry_run:
        print(
            f"{label}: {created + replaced} schedule(s) valid: {created} would be created, {replaced} replaced "
            "(--dry-run: nothing written)"
        )
    else:
        print(f"imported {created + replaced} schedule(s) from {label}: {created} created, {replaced} replaced")
    return EXIT_OK


def _offset(off: timedelta) -> str:
    """A UTC offset as +02:00 (+05:45, -03:00)."""
    minutes = int(off.total_seconds()) // 60
    sign = "-" if minutes < 0 else "+"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def cmd_next(args: argparse.Namespace) -> int:
    """schedule next WORKER [--count N]: the next instants the schedule fires, in its zone
    and in UTC, with why a DST change moved one (scrinalia.next_fires)."""
    with open_db(args) as conn:
        rows = conn.cursor(row_factory=dict_row).execute(sql.NEXT_FIRES, (args.worker, args.count)).fetchall()
    if args.json:
        print_json(rows)
        return EXIT_OK
    zone = cell(rows[0]["timezone"]) if rows else "-"
    print_table(
        ["#", f"{zone} (offset)", "UTC", "note"],
        [
            [r["n"], f"{r['local_time']:%Y-%m-%d %H:%M} ({_offset(r['utc_offset'])})", utc(r["fires_at"]), r["note"]]
            for r in rows
        ],
        title=f"the next {len(rows)} firing(s) of {cell(args.worker)}",
    )
    return EXIT_OK
