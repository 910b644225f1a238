"""The command line's argparse tree: commands, their options, and the value types they accept.

Each (sub)command's `func` is the function that runs it (cli/commands/); the tree itself
imports no command's dependencies, so `--help` loads neither the demo nor admin code.
"""

from __future__ import annotations

import argparse
from typing import Any, NoReturn

from scrinalia_workers import __version__, argtypes
from scrinalia_workers.cli.commands import admin, demo, runs, schedule, settings, status, web, worker
from scrinalia_workers.cli.common import PROG
from scrinalia_workers.errors import UsageError


class _Parser(argparse.ArgumentParser):
    # argparse prints the whole usage before its error: keep it to one line.
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")


BIGINT_MAX = 2**63 - 1


RUN_ID = argtypes.count(1, BIGINT_MAX, "a run id")
LIMIT = argtypes.count(1, 100_000)
BATCH = argtypes.count(1, 1_000_000)
MIGRATIONS = argtypes.count(1, 1_000)
DEMO_SECONDS = argtypes.seconds(0, 3600, above=True)
LOCK_WAIT = argtypes.seconds(0, 86400)
WATCH_INTERVAL = argtypes.seconds(0.2, 3600)
PAGE_SIZE = argtypes.count(10, 1000)
# the CLI's pages (worker list, status): a bound on one answer, --all is for more
PAGE_MAX = 10_000
PAGE = argtypes.count(1, PAGE_MAX)
REQUEST_TIMEOUT = argtypes.seconds(1, 300)


def _global_options(p: argparse.ArgumentParser, top: bool) -> None:
    # on the top parser they set the defaults; below, SUPPRESS keeps a value given
    # before the subcommand unless it is given again after it
    kw: dict[str, Any] = {} if top else {"default": argparse.SUPPRESS}
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
    p.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    def group(name: str, text: str) -> argparse._SubParsersAction[_Parser]:
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
    m.set_defaults(func=admin.cmd_migrate)

    gs = group("groups", "the cluster-wide groups, once per cluster (before migrate)")
    gs.add_parser("create", parents=[common], help="create them (needs CREATEROLE)").set_defaults(func=admin.cmd_groups)
    gs.add_parser("sql", parents=[common], help="print the SQL, for a DBA to run").set_defaults(func=admin.cmd_groups)
    gl = gs.add_parser(
        "logins",
        parents=[common],
        help="the groups, then a login per job (owner, scheduler, runner, exporter; web when its password is set) "
        "with the passwords "
        "SCRINALIA_<JOB>_PASSWORD gives (a superuser, once per cluster and database)",
    )
    gl.add_argument(
        "--reset-password",
        action="store_true",
        help="set the password of a login that exists already too (without it, it keeps its own)",
    )
    gl.add_argument(
        "--close-database",
        action="store_true",
        help="a database of its own (compose): CONNECT from PUBLIC to the groups and the owner only, and the owner "
        "in pg_signal_backend and pg_read_all_stats, so that a standby can end a login squatting the scheduler's lock",
    )
    gl.set_defaults(func=admin.cmd_groups)

    e = sub.add_parser("enqueue", parents=[common], help="enqueue a CLI run of a worker now")
    e.add_argument("worker")
    e.add_argument("--request", default="{}", metavar="JSON", help='the WorkerRunRequest, e.g. \'{"preset": "fast"}\'')
    e.add_argument("--requested-by", metavar="NAME", help="recorded on the run (default cli:USER@HOST)")
    e.set_defaults(func=runs.cmd_enqueue)

    ss = group("schedule", "read or change a worker's schedule")
    for action, text, func in (
        ("get", "show the schedule and its next run", schedule.cmd_get),
        ("delete", "delete the schedule", schedule.cmd_delete),
        ("pause", "pause (no period runs until resumed)", schedule.cmd_pause),
        ("resume", "resume, re-armed from the cron", schedule.cmd_resume),
    ):
        a = ss.add_parser(action, parents=[common], help=text)
        a.add_argument("worker")
        a.set_defaults(func=func)
    put = ss.add_parser("put", parents=[common], help="create or replace the schedule")
    put.add_argument("worker")
    put.add_argument("--cron", required=True, metavar="EXPR", help="five fields, e.g. '0 2 * * *' (docs/cron.md)")
    put.add_argument("--timezone", metavar="TZ", help="IANA zone (default: the DEFAULT_TIMEZONE setting)")
    put.add_argument("--request", default="{}", metavar="JSON", help="the request each scheduled run gets")
    put.add_argument("--disabled", action="store_true", help="save it paused")
    put.set_defaults(func=schedule.cmd_put)
    nx = ss.add_parser(
        "next", parents=[common], help="the next instants the schedule fires, in its zone and in UTC (DST noted)"
    )
    nx.add_argument("worker")
    nx.add_argument(
        "--count",
        type=LIMIT,
        default=10,
        metavar="N",
        help="how many (1..100, scrinalia.max_fire_previews(); default 10)",
    )
    nx.set_defaults(func=schedule.cmd_next)
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
    imp.set_defaults(func=schedule.cmd_import)

    st = sub.add_parser(
        "status",
        parents=[common],
        help="the scheduler lock and health, alerts, the agenda's totals and first workers, the busiest queues",
    )
    st.add_argument(
        "--limit",
        type=PAGE,
        metavar="N",
        help=f"agenda rows and queues shown, what needs an operator first (1..{PAGE_MAX}, "
        f"default {status.AGENDA_SHOWN}; --watch: {status.WATCH_AGENDA_SHOWN})",
    )
    st.add_argument(
        "--all", action="store_true", help="every worker's agenda row and queue, by name (slower on a large install)"
    )
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
    st.set_defaults(func=status.cmd_status)

    r = sub.add_parser(
        "runs",
        parents=[common],
        help="the run history, newest first; `runs rerun RUN_ID` re-runs an ended run by hand",
        usage=f"{PROG} runs [WORKER] [--limit N] [--timeline] | {PROG} runs rerun RUN_ID [--requested-by NAME]",
    )
    r.add_argument("worker", nargs="?")
    # `runs rerun RUN_ID`: a second positional rather than subcommands, which would take
    # WORKER's place (a worker named "rerun" is still listed by `runs rerun`)
    r.add_argument("rerun_id", nargs="?", type=RUN_ID, metavar="RUN_ID", help="with `rerun`: the ended run to re-run")
    r.add_argument("--requested-by", metavar="NAME", help="with `rerun`: recorded on the run (default cli:USER@HOST)")
    r.add_argument("--limit", type=LIMIT, default=20, metavar="N", help="how many (1..100000, default 20)")
    r.add_argument(
        "--timeline",
        action="store_true",
        help="WORKER's scheduled periods, each with its attempts, outcomes and delays",
    )
    r.set_defaults(func=runs.cmd_runs)

    c = sub.add_parser(
        "cancel",
        parents=[common],
        help="cancel a QUEUED run (a retry in its backoff too) or a RUNNING one (its lease fenced, its handler told)",
    )
    c.add_argument("run_id", type=RUN_ID, metavar="RUN_ID")
    c.set_defaults(func=runs.cmd_cancel)

    ses = group("settings", "a worker's persisted settings")
    sp = ses.add_parser("put", parents=[common], help="replace the persisted settings")
    sp.add_argument("worker")
    sp.add_argument("--settings", required=True, metavar="JSON")
    sp.set_defaults(func=settings.cmd_put)

    ws = group("worker", "the worker catalogue: register from a file (the owner, at deploy), list, show")
    wr = ws.add_parser(
        "register", parents=[common], help="register or update the workers of a JSON/YAML file, all or nothing"
    )
    wr.add_argument("file", metavar="FILE", help="a .json, .yaml or .yml file (- reads YAML/JSON from stdin)")
    wr.add_argument("--check", action="store_true", help="only check the file; no database needed")
    wr.set_defaults(func=worker.cmd_register)
    wl = ws.add_parser("list", parents=[common], help="the catalogue, a page at a time by name")
    wl.add_argument(
        "--limit",
        type=PAGE,
        metavar="N",
        help=f"workers per page (1..{PAGE_MAX}, default {worker.PAGE_SIZE})",
    )
    wl.add_argument("--after", metavar="NAME", help="the page after this worker's name (the last one printed)")
    wl.add_argument("--all", action="store_true", help="every worker, one list (slower on a large catalogue)")
    wl.set_defaults(func=worker.cmd_list)
    wsh = ws.add_parser("show", parents=[common], help="one worker's engines, presets, options and defaults")
    wsh.add_argument("worker")
    wsh.set_defaults(func=worker.cmd_show)

    pr = sub.add_parser("prune", parents=[common], help="delete old finished runs (scrinalia.prune_runs)")
    pr.add_argument("--older-than", required=True, metavar="INTERVAL", help="e.g. '30 days' (1 day at least)")
    pr.add_argument("--batch", type=BATCH, default=10000, metavar="N", help="runs per transaction (1..1000000)")
    pr.set_defaults(func=runs.cmd_prune)

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
    d.set_defaults(func=demo.cmd_demo)

    ds = sub.add_parser(
        "demo-seed",
        parents=[common],
        help="DEMO ONLY: register the demo-* workers and schedules (compose's demo profile)",
    )
    ds.set_defaults(func=demo.cmd_seed)

    wb = sub.add_parser(
        "web",
        parents=[common],
        help="serve the web view: agenda, active runs, alerts, histories, health (a reader login)",
    )
    wb.add_argument(
        "--bind", default="127.0.0.1:8080", metavar="HOST:PORT", help="where to listen (default 127.0.0.1:8080)"
    )
    wb.add_argument("--public", action="store_true", help="allow a --bind beyond the loopback")
    wb.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a Host name the view answers to besides the loopback's and --bind's (repeatable)",
    )
    wb.add_argument(
        "--allow-actions",
        action="store_true",
        help="offer pause/resume, enqueue, cancel and re-run (an operator login): off by default",
    )
    wb.add_argument(
        "--page-size", type=PAGE_SIZE, default=50, metavar="N", help="rows per panel (10..1000, default 50)"
    )
    wb.add_argument(
        "--request-timeout",
        type=REQUEST_TIMEOUT,
        default=15.0,
        metavar="SECONDS",
        help="the longest a request may take, reading it and the database's answer (1..300, default 15)",
    )
    wb.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"], help="default info")
    wb.set_defaults(func=web.cmd_web)

    for name, text in (
        ("scheduler", "run the scheduler daemon (its own --help)"),
        ("runner", "run the reference runner (its own --help)"),
    ):
        sub.add_parser(name, help=text, add_help=False)  # dispatched before parsing
    return p
