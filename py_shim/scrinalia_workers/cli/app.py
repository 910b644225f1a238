"""scrinalia-workers: the operator's command line over the SQL API.

Every command is a thin call of a stored function or a read of a view
(docs/sql-api.md); the database decides and validates. Errors are one line on
stderr, "scrinalia-workers: error: [SQLSTATE] message", never a traceback.
Exit codes: 0 done, 1 error, 2 bad usage, 3 the worker's slot is busy (SW010).
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import socket
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from scrinalia_workers import argtypes, errors
from scrinalia_workers.cli.fmt import duration as _duration
from scrinalia_workers.cli.fmt import in_zone as _in_zone
from scrinalia_workers.cli.fmt import print_fields, print_json, print_table
from scrinalia_workers.cli.fmt import utc as _utc
from scrinalia_workers.errors import UsageError
from scrinalia_workers.gateway.connection import connect, require_dsn
from scrinalia_workers.gateway.redact import redact
from scrinalia_workers.logs import one_line as _one_line

PROG = "scrinalia-workers"

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_SLOT_BUSY = 3

ERROR_WIDTH = 60  # how much of a run's error the runs table shows


class _Parser(argparse.ArgumentParser):
    # argparse prints the whole usage before its error: keep it to one line.
    def error(self, message: str):
        raise UsageError(f"{message} (see {self.prog} --help)")


# --- input --------------------------------------------------------------------


def parse_json_object(text: str, option: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(f"{option} is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    if not isinstance(value, dict):
        raise UsageError(f"{option} must be a JSON object, got {type(value).__name__}")
    return value


def who() -> str:
    """Who the ledger records for a CLI action: the OS user and host."""
    try:
        user = getpass.getuser()
    except Exception:  # no login name in some containers
        user = "unknown"
    return f"cli:{user}@{socket.gethostname()}"[:200]


def _connect(args) -> psycopg.Connection:
    dsn = require_dsn(args.dsn)
    try:
        return connect(dsn, application_name=f"{PROG} {args.command}")
    except psycopg.ProgrammingError as e:  # a malformed connection string (redacted by fail())
        raise errors.ConfigError(f"invalid connection string: {e}") from None


# --- commands -----------------------------------------------------------------


def cmd_migrate(args) -> int:
    from scrinalia_workers.admin import migrate

    dsn = require_dsn(args.dsn)
    if args.rollback:
        done = migrate.rollback(dsn, args.count, lock_timeout=args.lock_timeout)
        if args.json:
            print_json({"rolled_back": done})
        elif done:
            for mid in done:
                print(f"rolled back {mid}")
        else:
            print("nothing to roll back")
        return EXIT_OK
    if args.count is not None:
        raise UsageError("--count goes with --rollback")
    applied = migrate.migrate(dsn, create_groups=args.create_groups, lock_timeout=args.lock_timeout)
    with connect(dsn, application_name=f"{PROG} migrate") as conn:
        head = conn.execute("SELECT scrinalia.schema_head()").fetchone()[0]
    if args.json:
        print_json({"applied": applied, "schema_head": head})
        return EXIT_OK
    for mid in applied:
        print(f"applied {mid}")
    if not applied:
        print(f"already at the head ({head}): no migration to apply")
    print("re-installed the SQL code (functions, views, grants)")
    return EXIT_OK


def cmd_groups(args) -> int:
    from scrinalia_workers.admin import groups

    if args.action == "sql":
        print(groups.groups_sql(), end="")
        return EXIT_OK
    done = groups.create_at(require_dsn(args.dsn))
    if args.json:
        print_json({"created": done})
    else:
        print(f"created {', '.join(done)}" if done else "the groups are already set up: nothing to do")
    return EXIT_OK


def _max_attempts(conn: psycopg.Connection) -> int:
    return conn.execute("SELECT scrinalia.max_attempts()").fetchone()[0]  # the policy's one home


def _run_summary(r: dict, max_attempts: int) -> str:
    attempt = f" attempt {r['attempt']}/{max_attempts}" if r["trigger"] == "SCHEDULE" else ""
    return f"run #{r['run_id']} {r['status']} ({r['worker_name']}, {r['trigger']}{attempt})"


def cmd_enqueue(args) -> int:
    request = parse_json_object(args.request, "--request")
    with _connect(args) as conn:
        r = (
            conn.cursor(row_factory=dict_row)
            .execute(
                "SELECT * FROM scrinalia.enqueue(%s, %s, 'CLI', %s)",
                (args.worker, Jsonb(request), args.requested_by or who()),
            )
            .fetchone()
        )
        most = _max_attempts(conn)
    if args.json:
        print_json(r)
    else:
        print(f"enqueued {_run_summary(r, most)}")
        print(f"config {json.dumps(r['config'], ensure_ascii=False)}")
    return EXIT_OK


AGENDA_SQL = "SELECT * FROM scrinalia.worker_agenda WHERE worker_name = %s"


def _schedule_fields(a: dict, max_attempts: int) -> list[tuple[str, Any]]:
    if a["paused"]:
        nxt = "paused"
    elif a["awaiting_arm"]:
        nxt = "not armed yet (the scheduler computes it at its next tick)"
    else:
        nxt = f"{_in_zone(a['next_run_at'], a['timezone'])} ({_utc(a['next_run_at'])})"
    skipped = _utc(a["last_skipped_at"])
    if skipped and a["last_skip_reason"]:
        skipped += f" ({a['last_skip_reason']})"
    return [
        ("worker", a["worker_name"]),
        ("cron", a["cron"]),
        ("timezone", a["timezone"]),
        ("enabled", "no (paused)" if a["paused"] else "yes"),
        ("next run", nxt),
        ("request", json.dumps(a["request"], ensure_ascii=False)),
        ("last enqueued", _utc(a["last_enqueued_at"]) and f"{_utc(a['last_enqueued_at'])} (run #{a['last_run_id']})"),
        ("last skipped", skipped),
        ("active run", _active(a, max_attempts)),
        ("updated", a["updated_at"] and f"{_utc(a['updated_at'])} by {a['updated_by'] or '-'}"),
    ]


def _active(a: dict, max_attempts: int) -> str | None:
    if a["active_run_id"] is None:
        return None
    s = f"#{a['active_run_id']} {a['active_status']} {a['active_trigger']}"
    if a["active_trigger"] == "SCHEDULE":
        s += f" {a['active_attempt']}/{max_attempts}"
    if a["active_not_before"] and a["active_not_before"] > datetime.now(UTC):
        s += f" not before {_utc(a['active_not_before'])}"
    return s


def _show_schedule(conn, worker: str, as_json: bool) -> None:
    a = conn.cursor(row_factory=dict_row).execute(AGENDA_SQL, (worker,)).fetchone()
    if a is None:
        raise errors.ScrinaliaError(f"[{errors.UNKNOWN_WORKER}] unknown worker {worker!r}")
    if not a["scheduled"]:
        raise errors.ScrinaliaError(f"[{errors.NO_SCHEDULE}] worker {worker!r} has no schedule")
    if as_json:
        print_json(a)
    else:
        print_fields(_schedule_fields(a, _max_attempts(conn)))


def cmd_schedule(args) -> int:
    if args.action == "put":  # fast, local, field-naming errors before connecting
        from scrinalia_workers import cron

        expr = cron.validate(args.cron)
        if args.timezone is not None:
            cron.validate_timezone(args.timezone)
        request = parse_json_object(args.request, "--request")
    with _connect(args) as conn:
        if args.action == "get":
            _show_schedule(conn, args.worker, args.json)
            return EXIT_OK
        if args.action == "put":
            conn.execute(
                "SELECT scrinalia.put_schedule(%s, %s, %s, %s, %s, %s)",
                (args.worker, expr, args.timezone, Jsonb(request), not args.disabled, who()),
            )
            verb = "saved"
        elif args.action == "delete":
            conn.execute("SELECT scrinalia.delete_schedule(%s)", (args.worker,))
            if args.json:
                print_json({"deleted": args.worker})
            else:
                print(f"deleted the schedule of {args.worker}")
            return EXIT_OK
        else:
            enable = args.action == "resume"
            conn.execute("SELECT scrinalia.set_schedule_enabled(%s, %s, %s)", (args.worker, enable, who()))
            verb = "resumed (re-armed from the cron: paused periods are not caught up)" if enable else "paused"
        if not args.json:
            print(f"schedule of {args.worker} {verb}")
        _show_schedule(conn, args.worker, args.json)
    return EXIT_OK


# 100,000 schedules are about 8 MiB of JSON
SCHEDULE_FILE_MAX_BYTES = 64 * 1024 * 1024


def read_schedule_file(path: str) -> tuple[str, str]:
    """(label, the JSON array) of a schedule file: a JSON or YAML (.yaml/.yml; `-` reads
    either from stdin) list of {worker_name, cron, timezone?, request?, enabled?}, or
    {"schedules": [...]}. Only the file's syntax is checked here: every element is
    scrinalia.put_schedules' to judge, which names the one it refuses."""
    label = "<stdin>" if path == "-" else path
    try:
        if path == "-":
            text = sys.stdin.read()
        else:
            with open(path, "rb") as f:
                raw = f.read(SCHEDULE_FILE_MAX_BYTES + 1)
            if len(raw) > SCHEDULE_FILE_MAX_BYTES:
                raise errors.ScrinaliaError(f"{label}: larger than {SCHEDULE_FILE_MAX_BYTES // 2**20} MiB")
            text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise errors.ScrinaliaError(f"{label}: not UTF-8 text") from None
    except OSError as e:
        raise errors.ScrinaliaError(f"{label}: cannot read it: {e.strerror or e}") from None
    if path == "-" or path.lower().endswith((".yaml", ".yml")):
        import yaml

        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            at = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
            raise errors.ScrinaliaError(f"{label}: not valid YAML: {getattr(e, 'problem', None) or e}{at}") from None
    else:
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            raise errors.ScrinaliaError(
                f"{label}: not valid JSON: {e.msg} at line {e.lineno} column {e.colno}"
            ) from None
    if isinstance(doc, dict) and set(doc) == {"schedules"}:
        doc = doc["schedules"]
    if not isinstance(doc, list):
        raise errors.ScrinaliaError(
            f'{label}: expected a list of schedules or {{"schedules": [...]}}, got {type(doc).__name__}'
        )

    def not_json(v):  # YAML can say more than JSON: a date, a set
        raise TypeError(f"{v!r} is not a JSON value (quote it in YAML)")

    try:
        return label, json.dumps(doc, allow_nan=False, default=not_json)
    except (TypeError, ValueError) as e:
        raise errors.ScrinaliaError(f"{label}: {e}") from None


def cmd_schedule_import(args) -> int:
    label, schedules = read_schedule_file(args.file)
    with _connect(args) as conn:
        # --dry-run: the same call, rolled back (so no NOTIFY either)
        with conn.transaction(force_rollback=args.dry_run):
            try:
                created, replaced = conn.execute(
                    "SELECT created, replaced FROM scrinalia.put_schedules(%s::jsonb, %s)",
                    (schedules, who()),
                ).fetchone()
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


def _scheduler_line(s: dict) -> str:
    if s["lock_held"]:
        who_ = s["holder_application"] or "?"
        where = f" from {s['holder_client']}" if s["holder_client"] else ""
        line = f"lock held by pid {s['holder_pid']} ({who_}{where}, connected {_utc(s['holder_backend_start'])})"
    else:
        line = "NO scheduler holds the lock: nothing is ticking"
    if s["last_tick_at"]:
        line += f"; last tick {_utc(s['last_tick_at'])} by {s['last_tick_by'] or '-'} ({s['ticks']} ticks)"
    else:
        line += "; never ticked"
    return line


def cmd_status(args) -> int:
    if args.watch:
        from scrinalia_workers.cli.watch import watch

        _connect(args).close()  # a bad DSN or login is one line before the screen takes over
        return watch(lambda: _connect(args), args.interval)
    with _connect(args) as conn:
        cur = conn.cursor(row_factory=dict_row)
        agenda = cur.execute("SELECT * FROM scrinalia.worker_agenda ORDER BY worker_name").fetchall()
        counters = cur.execute("SELECT * FROM scrinalia.worker_queue_counters ORDER BY worker_name").fetchall()
        sched = cur.execute("SELECT * FROM scrinalia.scheduler_status()").fetchone()
        health = cur.execute("SELECT healthy, reason FROM scrinalia.scheduler_health()").fetchone()
        most = _max_attempts(conn)
    if args.json:
        print_json({"scheduler": sched, "health": health, "agenda": agenda, "queue_counters": counters})
        return EXIT_OK
    print(f"scheduler: {_scheduler_line(sched)}")
    print("health: " + ("healthy" if health["healthy"] else f"NOT HEALTHY: {health['reason']}"))
    print()
    rows = []
    for a in agenda:
        if not a["scheduled"]:
            nxt_zone = nxt_utc = "unscheduled"
        elif a["paused"]:
            nxt_zone, nxt_utc = "paused", "-"
        elif a["arm_error"]:
            nxt_zone, nxt_utc = f"SET ASIDE: {_one_line(a['arm_error'], 60)}", _utc(a["arm_retry_at"])
        elif a["awaiting_arm"]:
            nxt_zone, nxt_utc = "not armed yet", "-"
        else:
            nxt_zone, nxt_utc = _in_zone(a["next_run_at"], a["timezone"]), _utc(a["next_run_at"])
        skipped = _utc(a["last_skipped_at"])
        rows.append(
            [
                a["worker_name"],
                a["cron"],
                a["timezone"],
                nxt_zone,
                nxt_utc,
                "yes" if a["paused"] else ("no" if a["scheduled"] else None),
                _utc(a["last_enqueued_at"]),
                skipped,
                _one_line(a["last_skip_reason"], 40) if skipped else None,
                _active(a, most),
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
            "active run",
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


# All runs, newest first: the primary key read backwards.
RUNS_SQL = "SELECT * FROM scrinalia.worker_run_history ORDER BY run_id DESC LIMIT %(n)s"
# One worker's: its QUEUED/RUNNING run (its one slot) and its newest finished runs
# (ix_worker_runs_finished, whose predicate the second branch repeats).
WORKER_RUNS_SQL = """
SELECT * FROM scrinalia.worker_run_history
 WHERE worker_name = %(w)s AND status IN ('QUEUED', 'RUNNING')
UNION ALL
(SELECT * FROM scrinalia.worker_run_history
  WHERE worker_name = %(w)s AND status NOT IN ('QUEUED', 'RUNNING')
  ORDER BY run_id DESC LIMIT %(n)s)
ORDER BY run_id DESC LIMIT %(n)s"""


def cmd_runs(args) -> int:
    sql = RUNS_SQL if args.worker is None else WORKER_RUNS_SQL
    if args.timeline and args.worker is None:
        raise errors.ConfigError("runs --timeline needs a WORKER")
    with _connect(args) as conn:
        if args.worker is not None:
            known = conn.execute(
                "SELECT 1 FROM scrinalia.worker_agenda WHERE worker_name = %s", (args.worker,)
            ).fetchone()
            if not known:
                raise errors.ScrinaliaError(f"[{errors.UNKNOWN_WORKER}] unknown worker {args.worker!r}")
        if args.timeline:
            from scrinalia_workers.cli.watch import timeline

            print(timeline(conn, args.worker, periods=min(args.limit, 1000)))
            return EXIT_OK
        rows = conn.cursor(row_factory=dict_row).execute(sql, {"w": args.worker, "n": args.limit}).fetchall()
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
            "retry of",
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
                r["trigger"],
                r["status"],
                r["attempt_label"],
                r["retry_of"] and f"retry of #{r['retry_of']}",
                _utc(r["not_before"]),
                _utc(r["created_at"]),
                _utc(r["finished_at"]),
                _duration(r["duration"]),
                _one_line(r["error"], ERROR_WIDTH),
            ]
            for r in rows
        ],
    )
    return EXIT_OK


def cmd_cancel(args) -> int:
    with _connect(args) as conn:
        r = (
            conn.cursor(row_factory=dict_row)
            .execute("SELECT * FROM scrinalia.cancel_run(%s, %s)", (args.run_id, who()))
            .fetchone()
        )
        most = _max_attempts(conn)
    if args.json:
        print_json(r)
    else:
        print(f"cancelled {_run_summary(r, most)}: the slot is free, it will not be retried")
    return EXIT_OK


def cmd_settings(args) -> int:
    settings = parse_json_object(args.settings, "--settings")
    with _connect(args) as conn:
        r = (
            conn.cursor(row_factory=dict_row)
            .execute("SELECT * FROM scrinalia.put_settings(%s, %s, %s)", (args.worker, Jsonb(settings), who()))
            .fetchone()
        )
    if args.json:
        print_json(r)
    else:
        print(f"settings of {r['worker_name']} saved: {json.dumps(r['settings'], ensure_ascii=False)}")
    return EXIT_OK


def cmd_prune(args) -> int:
    total = 0
    with _connect(args) as conn:
        while True:  # one transaction per batch: short locks, progress survives an abort
            n = conn.execute("SELECT scrinalia.prune_runs(%s::interval, %s)", (args.older_than, args.batch)).fetchone()[
                0
            ]
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


def cmd_demo(args) -> int:
    from scrinalia_workers.demo.narrate import run

    return run(duration=args.duration, dsn=args.dsn)


def cmd_demo_seed(args) -> int:
    from scrinalia_workers.demo.setup import seed

    with _connect(args) as conn:
        done = seed(conn)
    if args.json:
        print_json([{"worker": w, "cron": c, "schedule_changed": ch} for w, c, _, ch in done])
        return EXIT_OK
    for w, c, what, changed in done:
        print(f"{w:<16} {c:<12} {'scheduled' if changed else 'already scheduled'}: {what}")
    return EXIT_OK


# --- the worker catalogue (the owner's, deploy time) -------------------------------


def cmd_worker_register(args) -> int:
    from scrinalia_workers.admin import catalogue

    workers = catalogue.read(args.file)
    label = "<stdin>" if args.file == "-" else args.file
    if args.check:
        if args.json:
            print_json({"file": label, "valid": [w["name"] for w in workers]})
        else:
            print(f"{label}: {len(workers)} worker(s) valid: {', '.join(w['name'] for w in workers)}")
        return EXIT_OK
    with _connect(args) as conn:
        done = catalogue.register(conn, workers, label)
    if args.json:
        print_json({"file": label, "registered": [{"worker": n, "new": new} for n, new in done]})
    else:
        print(
            f"registered {len(done)} worker(s) from {label}: "
            + ", ".join(f"{n} ({'new' if new else 'updated'})" for n, new in done)
        )
    return EXIT_OK


CATALOGUE_SQL = (
    "SELECT worker_name, description, engines, presets, options, default_config, created_at, updated_at"
    " FROM scrinalia.archive_workers"
)


def cmd_worker_list(args) -> int:
    with _connect(args) as conn:
        rows = conn.cursor(row_factory=dict_row).execute(CATALOGUE_SQL + " ORDER BY worker_name").fetchall()
    if args.json:
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
                _utc(r["updated_at"]),
                _one_line(r["description"], 50) or None,
            ]
            for r in rows
        ],
    )
    return EXIT_OK


def cmd_worker_show(args) -> int:
    with _connect(args) as conn:
        r = (
            conn.cursor(row_factory=dict_row)
            .execute(CATALOGUE_SQL + " WHERE worker_name = %s", (args.worker,))
            .fetchone()
        )
    if r is None:
        raise errors.ScrinaliaError(
            f"[{errors.UNKNOWN_WORKER}] unknown worker {args.worker!r} (hint: {PROG} worker list)"
        )
    if args.json:
        print_json(r)
        return EXIT_OK
    compact = lambda v: json.dumps(v, ensure_ascii=False) if v else None  # noqa: E731
    print_fields(
        [
            ("worker", r["worker_name"]),
            ("description", r["description"] or None),
            ("engines", compact(r["engines"])),
            ("presets", compact(r["presets"])),
            ("options", compact(r["options"])),
            ("default config", compact(r["default_config"])),
            ("created", _utc(r["created_at"])),
            ("updated", _utc(r["updated_at"])),
        ]
    )
    return EXIT_OK


def _delegate(name: str, argv: list[str]) -> int:
    if name == "scheduler":
        from scrinalia_workers.scheduler import main as target
    else:
        from scrinalia_workers.runner import main as target
    return target(argv) or 0


# --- parser -------------------------------------------------------------------

BIGINT_MAX = 2**63 - 1


RUN_ID = argtypes.count(1, BIGINT_MAX, "a run id")
LIMIT = argtypes.count(1, 100_000)
BATCH = argtypes.count(1, 1_000_000)
MIGRATIONS = argtypes.count(1, 1_000)
DEMO_SECONDS = argtypes.seconds(0, 3600, above=True)
LOCK_WAIT = argtypes.seconds(0, 86400)
WATCH_INTERVAL = argtypes.seconds(0.2, 3600)


def _global_options(p: argparse.ArgumentParser, top: bool) -> None:
    # on the top parser they set the defaults; below, SUPPRESS keeps a value given
    # before the subcommand unless it is given again after it
    kw = {} if top else {"default": argparse.SUPPRESS}
    p.add_argument(
        "--dsn",
        help="libpq connection string or URI (else DATABASE_URL, else the PG* variables)",
        **({"default": None} if top else kw),
    )
    p.add_argument(
        "--json", action="store_true", help="print JSON instead of text", **({"default": False} if top else kw)
    )


def build_parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    _global_options(common, top=False)

    p = _Parser(
        prog=PROG,
        description="Operate the scrinalia worker ledger, schedules and retries.",
        epilog="--dsn and --json go before or after the command. "
        "exit codes: 0 done, 1 error, 2 bad usage, 3 the worker's slot is busy",
    )
    _global_options(p, top=True)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    def group(name: str, text: str) -> argparse._SubParsersAction:
        g = sub.add_parser(name, parents=[common], help=text)
        actions = g.add_subparsers(dest="action", metavar="ACTION", parser_class=_Parser)
        actions.required = True
        return actions

    m = sub.add_parser("migrate", parents=[common], help="apply the migrations and re-install the SQL code")
    m.add_argument("--rollback", action="store_true", help="roll back migrations instead (all, or --count)")
    m.add_argument("--count", type=MIGRATIONS, metavar="N", help="with --rollback: how many, newest first")
    m.add_argument(
        "--create-groups",
        action="store_true",
        help="first create the cluster-wide groups when missing (needs CREATEROLE)",
    )
    m.add_argument(
        "--lock-timeout",
        type=LOCK_WAIT,
        default=60.0,
        metavar="SECONDS",
        help="how long to wait for another migrate's lock (0..86400, default 60)",
    )
    m.set_defaults(func=cmd_migrate)

    gs = group("groups", "the cluster-wide groups, once per cluster (before migrate)")
    gs.add_parser("create", parents=[common], help="create them (needs CREATEROLE)").set_defaults(func=cmd_groups)
    gs.add_parser("sql", parents=[common], help="print the SQL, for a DBA to run").set_defaults(func=cmd_groups)

    e = sub.add_parser("enqueue", parents=[common], help="enqueue a CLI run of a worker now")
    e.add_argument("worker")
    e.add_argument("--request", default="{}", metavar="JSON", help='the WorkerRunRequest, e.g. \'{"preset": "fast"}\'')
    e.add_argument("--requested-by", metavar="NAME", help="recorded on the run (default cli:USER@HOST)")
    e.set_defaults(func=cmd_enqueue)

    ss = group("schedule", "read or change a worker's schedule")
    for action, text in (
        ("get", "show the schedule and its next run"),
        ("delete", "delete the schedule"),
        ("pause", "pause (no period runs until resumed)"),
        ("resume", "resume, re-armed from the cron"),
    ):
        a = ss.add_parser(action, parents=[common], help=text)
        a.add_argument("worker")
        a.set_defaults(func=cmd_schedule)
    put = ss.add_parser("put", parents=[common], help="create or replace the schedule")
    put.add_argument("worker")
    put.add_argument("--cron", required=True, metavar="EXPR", help="five fields, e.g. '0 2 * * *' (docs/cron.md)")
    put.add_argument("--timezone", metavar="TZ", help="IANA zone (default: the DEFAULT_TIMEZONE setting)")
    put.add_argument("--request", default="{}", metavar="JSON", help="the request each scheduled run gets")
    put.add_argument("--disabled", action="store_true", help="save it paused")
    put.set_defaults(func=cmd_schedule)
    imp = ss.add_parser(
        "import", parents=[common], help="create or replace the schedules of a JSON/YAML file, all or nothing"
    )
    imp.add_argument(
        "file",
        metavar="FILE",
        help="a .json, .yaml or .yml list of {worker_name, cron, timezone?, request?, enabled?} "
        "(- reads YAML/JSON from stdin); each is held to `schedule put`'s rules",
    )
    imp.add_argument("--dry-run", action="store_true", help="validate everything in the database, write nothing")
    imp.set_defaults(func=cmd_schedule_import)

    st = sub.add_parser("status", parents=[common], help="agenda, queue counters and the scheduler lock")
    st.add_argument(
        "--watch",
        action="store_true",
        help="a live view, refreshed in place (Ctrl-C quits): health, agenda, active runs, failures",
    )
    st.add_argument(
        "--interval",
        type=WATCH_INTERVAL,
        default=2.0,
        metavar="SECONDS",
        help="--watch refresh interval (0.2..3600, default 2)",
    )
    st.set_defaults(func=cmd_status)

    r = sub.add_parser("runs", parents=[common], help="the run history, newest first")
    r.add_argument("worker", nargs="?")
    r.add_argument("--limit", type=LIMIT, default=20, metavar="N", help="how many (1..100000, default 20)")
    r.add_argument(
        "--timeline",
        action="store_true",
        help="WORKER's scheduled periods, each with its attempts, outcomes and delays",
    )
    r.set_defaults(func=cmd_runs)

    c = sub.add_parser("cancel", parents=[common], help="cancel a QUEUED run (a retry in its backoff too)")
    c.add_argument("run_id", type=RUN_ID, metavar="RUN_ID")
    c.set_defaults(func=cmd_cancel)

    ses = group("settings", "a worker's persisted settings")
    sp = ses.add_parser("put", parents=[common], help="replace the persisted settings")
    sp.add_argument("worker")
    sp.add_argument("--settings", required=True, metavar="JSON")
    sp.set_defaults(func=cmd_settings)

    ws = group("worker", "the worker catalogue: register from a file (the owner, at deploy), list, show")
    wr = ws.add_parser(
        "register", parents=[common], help="register or update the workers of a JSON/YAML file, all or nothing"
    )
    wr.add_argument("file", metavar="FILE", help="a .json, .yaml or .yml file (- reads YAML/JSON from stdin)")
    wr.add_argument("--check", action="store_true", help="only check the file; no database needed")
    wr.set_defaults(func=cmd_worker_register)
    wl = ws.add_parser("list", parents=[common], help="the catalogue")
    wl.set_defaults(func=cmd_worker_list)
    wsh = ws.add_parser("show", parents=[common], help="one worker's engines, presets, options and defaults")
    wsh.add_argument("worker")
    wsh.set_defaults(func=cmd_worker_show)

    pr = sub.add_parser("prune", parents=[common], help="delete old finished runs (scrinalia.prune_runs)")
    pr.add_argument("--older-than", required=True, metavar="INTERVAL", help="e.g. '30 days' (1 day at least)")
    pr.add_argument("--batch", type=BATCH, default=10000, metavar="N", help="runs per transaction (1..1000000)")
    pr.set_defaults(func=cmd_prune)

    d = sub.add_parser(
        "demo",
        parents=[common],
        help="scheduler + runners narrated, on a throwaway database (or an empty one of yours)",
    )
    d.add_argument(
        "--duration",
        type=DEMO_SECONDS,
        metavar="SECONDS",
        help="run this long (default: until it has shown everything, about a minute)",
    )
    d.set_defaults(func=cmd_demo)

    ds = sub.add_parser(
        "demo-seed",
        parents=[common],
        help="DEMO ONLY: register the demo-* workers and schedules (compose's demo profile)",
    )
    ds.set_defaults(func=cmd_demo_seed)

    for name, text in (
        ("scheduler", "run the scheduler daemon (its own --help)"),
        ("runner", "run the reference runner (its own --help)"),
    ):
        sub.add_parser(name, help=text, add_help=False)  # dispatched before parsing
    return p


# PostgreSQL's own errors that mean "not set up", with what to do about them.
SETUP_HINTS = {
    "3F000": "the database is not migrated: run scrinalia-workers migrate as the database owner",
    "42P01": "the database is not migrated (or is an old release): run scrinalia-workers migrate as the database owner",
    "42883": "the database is not migrated (or is an old release): run scrinalia-workers migrate as the database owner",
    "42501": "this login lacks the group the command needs (docs/sql-api.md, Roles)",
}
# the catalogue is the owner's: no group reads or writes it
CATALOGUE_HINT = "the worker catalogue is the owner's: run it as the login that migrates"


def _db_error_line(e: psycopg.Error, command: str | None) -> str:
    diag = e.diag
    msg = diag.message_primary or str(e)
    line = f"[{e.sqlstate}] {msg}" if e.sqlstate else msg
    hint = diag.message_hint or (
        CATALOGUE_HINT
        if e.sqlstate == "42501" and command in ("worker", "demo", "demo-seed")
        else SETUP_HINTS.get(e.sqlstate or "")
    )
    if hint:
        line += f" (hint: {hint})"
    for note in getattr(e, "__notes__", ()):
        line = f"{note}: {line}"
    return line


def _given_dsns(argv: Sequence[str]) -> list[str]:
    """Every --dsn value on the command line, parsed or not, for redact()."""
    found = []
    for i, a in enumerate(argv):
        if a == "--dsn" and i + 1 < len(argv):
            found.append(argv[i + 1])
        elif a.startswith("--dsn="):
            found.append(a[len("--dsn=") :])
    return found


def fail(message: str, code: int = EXIT_ERROR, dsns: Sequence[str] = ()) -> int:
    text = redact(" ".join(str(message).split()), *dsns)
    print(f"{PROG}: error: {text}", file=sys.stderr)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    dsns = _given_dsns(argv)
    command = None
    try:
        if argv and argv[0] in ("scheduler", "runner"):
            return _delegate(argv[0], argv[1:])
        args = build_parser().parse_args(argv)
        command = args.command
        return args.func(args)
    except UsageError as e:
        return fail(str(e), EXIT_USAGE, dsns)
    except psycopg.Error as e:
        code = EXIT_SLOT_BUSY if e.sqlstate == errors.SLOT_BUSY else EXIT_ERROR
        return fail(_db_error_line(e, command), code, dsns)
    except errors.ScrinaliaError as e:
        sqlstate = getattr(e, "sqlstate", None)
        return fail(f"[{sqlstate}] {e}" if sqlstate else str(e), EXIT_ERROR, dsns)
    except ImportError as e:
        return fail(f"this installation lacks a part: {e}", EXIT_ERROR, dsns)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `scrinalia-workers runs | head`
        try:
            sys.stdout = open(os.devnull, "w")  # no second error when Python flushes at exit
        except OSError:
            pass
        return EXIT_OK
    except Exception as e:  # a bug of ours: still one line, with what to report
        return fail(f"unexpected {type(e).__name__}: {e} (please report it)", EXIT_ERROR, dsns)
