"""enqueue, runs, runs rerun, cancel, prune: the runs of the ledger, made, read, re-run,
cancelled, pruned."""

from __future__ import annotations

import argparse
import json
from typing import Any

from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from scrinalia_workers import errors
from scrinalia_workers.cli.common import EXIT_OK, max_attempts, one, open_db, parse_json_object, who
from scrinalia_workers.cli.fmt import duration, print_json, print_table, utc
from scrinalia_workers.gateway.statements import cli as sql
from scrinalia_workers.logs import one_line

ERROR_WIDTH = 60  # how much of a run's error the runs table shows


def _summary(r: dict[str, Any], most: int) -> str:
    attempt = f" attempt {r['attempt']}/{most}" if r["trigger"] == "SCHEDULE" else ""
    return f"run #{r['run_id']} {r['status']} ({r['worker_name']}, {r['trigger']}{attempt})"


def cmd_enqueue(args: argparse.Namespace) -> int:
    request = parse_json_object(args.request, "--request")
    with open_db(args) as conn:
        cur = conn.cursor(row_factory=dict_row)
        r = one(cur.execute(sql.ENQUEUE, (args.worker, Jsonb(request), args.requested_by or who())))
        most = max_attempts(conn)
    if args.json:
        print_json(r)
    else:
        print(f"enqueued {_summary(r, most)}")
        print(f"config {json.dumps(r['config'], ensure_ascii=False)}")
    return EXIT_OK


def _links(r: dict[str, Any]) -> str | None:
    """A history row's links: the run it retries or re-runs, the runs that re-ran it."""
    parts = []
    if r["retry_of"]:
        parts.append(f"retry of #{r['retry_of']}")
    if r.get("rerun_of"):
        parts.append(f"re-run of #{r['rerun_of']}")
    if r.get("rerun_by"):
        parts.append("re-run by " + ",".join(f"#{i}" for i in r["rerun_by"]))
    return "; ".join(parts) or None


def cmd_runs(args: argparse.Namespace) -> int:
    if args.rerun_id is not None:
        if args.worker != "rerun":
            raise errors.UsageError(f"runs takes one WORKER, or `rerun RUN_ID`, not {args.worker!r} and a run id")
        return cmd_rerun(args)
    if args.requested_by is not None:
        raise errors.UsageError("--requested-by goes with `runs rerun RUN_ID`")
    if args.timeline and args.worker is None:
        raise errors.ConfigError("runs --timeline needs a WORKER")
    with open_db(args) as conn:
        if args.worker is not None:
            if conn.execute(sql.WORKER_KNOWN, (args.worker,)).fetchone() is None:
                raise errors.ScrinaliaError(f"[{errors.UNKNOWN_WORKER}] unknown worker {args.worker!r}")
        if args.timeline:
            from scrinalia_workers.cli.watch import timeline

            print(timeline(conn, args.worker, periods=min(args.limit, 1000)))
            return EXIT_OK
        statement = sql.RUNS if args.worker is None else sql.WORKER_RUNS
        rows = conn.cursor(row_factory=dict_row).execute(statement, {"w": args.worker, "n": args.limit}).fetchall()
    if args.json:
        print_json(rows)
        return EXIT_OK
    print_table(
        [
            "id",
            "worker",
            "trigger",
            "status",
            "attempt",
            "links",
            "not before",
            "created",
            "finished",
            "duration",
            "error",
        ],
        [
            [
                r["run_id"],
                r["worker_name"],
                f"{r['trigger']} catch-up" if r["catch_up"] else r["trigger"],
                r["status"],
                r["attempt_label"],
                _links(r),
                utc(r["not_before"]),
                utc(r["created_at"]),
                utc(r["finished_at"]),
                duration(r["duration"]),
                one_line(r["error"], ERROR_WIDTH),
            ]
            for r in rows
        ],
    )
    return EXIT_OK


def cmd_cancel(args: argparse.Namespace) -> int:
    with open_db(args) as conn:
        r = one(conn.cursor(row_factory=dict_row).execute(sql.CANCEL_RUN, (args.run_id, who())))
        most = max_attempts(conn)
    if args.json:
        print_json(r)
    else:
        # (a run that had started was RUNNING: its runner learns it at its next heartbeat)
        running = " while it ran: its runner stops it at its next heartbeat;" if r["started_at"] else ":"
        print(f"cancelled {_summary(r, most)}{running} the slot is free, it will not be retried")
    return EXIT_OK


def cmd_rerun(args: argparse.Namespace) -> int:
    """runs rerun RUN_ID: a MANUAL run of an ended run's request, linked to it."""
    with open_db(args) as conn:
        r = one(conn.cursor(row_factory=dict_row).execute(sql.RERUN, (args.rerun_id, args.requested_by or who())))
        most = max_attempts(conn)
    if args.json:
        print_json({**r, "rerun_of": args.rerun_id})
    else:
        print(f"enqueued {_summary(r, most)}, a re-run of run #{args.rerun_id}: it is not retried if it fails")
    return EXIT_OK


def cmd_prune(args: argparse.Namespace) -> int:
    total = 0
    with open_db(args) as conn:
        while True:  # one transaction per batch: short locks, progress survives an abort
            (n,) = one(conn.execute(sql.PRUNE_RUNS, (args.older_than, args.batch)))
            total += n
            if n == 0:
                break
    if args.json:
        print_json({"deleted": total, "older_than": args.older_than})
    else:
        print(
            f"deleted {total} finished run(s) older than {args.older_than} (whole retry chains only; live retries kept)"
        )
    return EXIT_OK
