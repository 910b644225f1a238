"""worker register|list|show: the worker catalogue, the owner's (register runs at deploy time)."""

from __future__ import annotations

import argparse
import json
import shlex
from typing import Any

from psycopg.rows import dict_row

from scrinalia_workers import errors
from scrinalia_workers.cli.common import EXIT_OK, PROG, one, open_db
from scrinalia_workers.gateway.connection import configured_dsn
from scrinalia_workers.gateway.statements import cli as sql
from scrinalia_workers.logs import one_line
from scrinalia_workers.presentation.fmt import duration, print_fields, print_json, print_line, print_table, utc


def cmd_register(args: argparse.Namespace) -> int:
    from scrinalia_workers.admin import catalogue

    workers = catalogue.read(args.file)
    label = "<stdin>" if args.file == "-" else args.file
    if args.check:
        # with a database configured, the check is the register itself, rolled back: the
        # same checks exactly; without one, the file's (which register runs first)
        checked = "file"
        if configured_dsn(args.dsn) is not None:
            with open_db(args) as conn:
                catalogue.register(conn, workers, label, dry_run=True)
            checked = "database"
        if args.json:
            print_json({"file": label, "valid": [w["name"] for w in workers], "checked": checked})
        else:
            print(
                f"{label}: {len(workers)} worker(s) valid: {', '.join(w['name'] for w in workers)}"
                + ("" if checked == "database" else " (the file only: no database configured)")
            )
        return EXIT_OK
    with open_db(args) as conn:
        done = catalogue.register(conn, workers, label)
    if args.json:
        print_json({"file": label, "registered": [{"worker": n, "new": new} for n, new in done]})
    else:
        print(
            f"registered {len(done)} worker(s) from {label}: "
            + ", ".join(f"{n} ({'new' if new else 'updated'})" for n, new in done)
        )
    return EXIT_OK


# worker list's page: how many workers it prints unless --limit or --all says otherwise
PAGE_SIZE = 100


def _page_footer(shown: int, before: int, total: int, last: str | None, limit: int) -> str | None:
    """Where the page is among all the workers, and the command for the next one; None
    when the page holds them all."""
    if shown == total:
        return None
    if not shown:
        return f"no workers after that name: {total:,} in all (the first page: {PROG} worker list)"
    line = f"workers {before + 1:,}-{before + shown:,} of {total:,}, by name"
    if last is not None and before + shown < total:
        more = f" --limit {limit}" if limit != PAGE_SIZE else ""
        line += f"; the next page: {PROG} worker list --after {shlex.quote(last)}{more}"
    return line + f"; every one: {PROG} worker list --all"


def cmd_list(args: argparse.Namespace) -> int:
    if args.all and (args.limit is not None or args.after is not None):
        raise errors.UsageError("--all lists every worker: give it without --limit and --after")
    limit = args.limit or PAGE_SIZE
    after = args.after or ""
    with open_db(args) as conn:
        cur = conn.cursor(row_factory=dict_row)
        if args.all:
            rows = cur.execute(sql.CATALOGUE).fetchall()
            footer = None
        else:
            count = one(cur.execute(sql.CATALOGUE_COUNT, {"after": after}))
            rows = cur.execute(sql.CATALOGUE_PAGE, {"after": after, "n": limit}).fetchall()
            last = rows[-1]["worker_name"] if rows else None
            footer = _page_footer(len(rows), count["before"], count["workers"], last, limit)
    if args.json:
        # the page's rows: a page shorter than --limit is the last one
        print_json(rows)
        return EXIT_OK
    print_table(
        ["worker", "engines", "presets", "options", "updated", "description"],
        [
            [
                r["worker_name"],
                ", ".join(r["engines"]) or None,
                ", ".join(r["presets"]) or None,
                ", ".join(r["options"]) or None,
                utc(r["updated_at"]),
                one_line(r["description"], 50) or None,
            ]
            for r in rows
        ],
    )
    if footer:
        print_line(footer)
    return EXIT_OK


def _compact(v: Any) -> str | None:
    return json.dumps(v, ensure_ascii=False) if v else None


def cmd_show(args: argparse.Namespace) -> int:
    with open_db(args) as conn:
        r = conn.cursor(row_factory=dict_row).execute(sql.CATALOGUE_WORKER, (args.worker,)).fetchone()
    if r is None:
        raise errors.ScrinaliaError(
            f"[{errors.UNKNOWN_WORKER}] unknown worker {args.worker!r} (hint: {PROG} worker list)"
        )
    if args.json:
        print_json(r)
        return EXIT_OK
    print_fields(
        [
            ("worker", r["worker_name"]),
            ("description", r["description"] or None),
            ("engines", _compact(r["engines"])),
            ("presets", _compact(r["presets"])),
            ("options", _compact(r["options"])),
            ("default config", _compact(r["default_config"])),
            (
                "max run time",
                f"{duration(r['max_run_time'])} ("
                + ("the default" if r["max_run_time_is_default"] else "this worker's own: scrinalia.set_max_run_time")
                + "; a run still running then is interrupted)",
            ),
            ("created", utc(r["created_at"])),
            ("updated", utc(r["updated_at"])),
        ]
    )
    return EXIT_OK
