"""`scrinalia-scheduler`: the command line, the start-up checks and the signals."""

from __future__ import annotations

import argparse
import signal
from dataclasses import replace

from scrinalia_workers import __version__, argtypes
from scrinalia_workers.collector import tune_for_daemon
from scrinalia_workers.errors import ConfigError
from scrinalia_workers.exits import exit_at_once
from scrinalia_workers.gateway.checks import STARTUP_WAIT_MAX, preflight, startup_wait
from scrinalia_workers.gateway.dsn_password import warn_if_password_in_argv
from scrinalia_workers.gateway.statements.scheduler import REQUIRED_FUNCTIONS
from scrinalia_workers.logs import EventLog, route_library_logs, startup_error
from scrinalia_workers.policy import MAX_ACTOR_LENGTH
from scrinalia_workers.scheduler.daemon import Scheduler
from scrinalia_workers.scheduler.settings import DEFAULTS

EXIT_CONFIG = 2

# the first is the least-privilege choice; ADR 0015 lets the API's and a runner's login run it too
GROUPS = ("scrinalia_scheduler", "scrinalia_operator", "scrinalia_runner")


def build_parser() -> argparse.ArgumentParser:
    p = argtypes.DaemonParser(prog="scrinalia-scheduler", description="the one-instance cron scheduler")
    p.add_argument("--version", action="version", version=f"scrinalia-scheduler {__version__}")
    p.add_argument("--dsn", help="database (else DATABASE_URL or the PG* variables)")
    p.add_argument(
        "--standby-retry",
        type=argtypes.seconds(0.05, 3600),
        default=DEFAULTS.standby_retry,
        metavar="SECONDS",
        help=f"seconds between two looks of a standby at the holder (default {DEFAULTS.standby_retry:g})",
    )
    p.add_argument(
        "--max-sleep",
        type=argtypes.seconds(0.05, 3600),
        default=DEFAULTS.max_sleep,
        metavar="SECONDS",
        help=f"the longest sleep between passes (default {DEFAULTS.max_sleep:g})",
    )
    p.add_argument(
        "--min-wake-interval",
        type=argtypes.seconds(0.0, 10),
        default=DEFAULTS.min_wake_interval,
        metavar="SECONDS",
        help=f"NOTIFY wake-ups closer than this to the last pass are coalesced (default {DEFAULTS.min_wake_interval:g})",
    )
    argtypes.add_wait_for_database(p, STARTUP_WAIT_MAX)
    p.add_argument("--name", type=_name, help="recorded as the ticker (default host:pid)")
    p.add_argument("--json", action="store_true", help="JSON log lines")
    p.add_argument(
        "--log-level",
        default="info",
        type=str.lower,
        choices=["debug", "info", "warning", "error"],
        help="case-insensitive: debug, info, warning, error",
    )
    return p


def _name(text: str) -> str:
    if not 1 <= len(text) <= MAX_ACTOR_LENGTH or not text.isprintable():
        raise argparse.ArgumentTypeError(f"a name is 1 to {MAX_ACTOR_LENGTH} printable characters")
    return text


def main(argv: list[str] | None = None) -> int:
    tune_for_daemon()
    args = build_parser().parse_args(argv)
    log = EventLog(json_lines=args.json, level=args.log_level)
    route_library_logs(log)
    warn_if_password_in_argv(args.dsn, log)
    try:
        dsn = preflight(
            args.dsn,
            "scrinalia-scheduler check",
            functions=REQUIRED_FUNCTIONS,
            job="run the scheduler",
            groups=GROUPS,
            server_keepalives=True,
            wait=startup_wait(log, args.wait_for_database),
        )
    except ConfigError as e:
        startup_error(log, "scrinalia-scheduler", args.json, e)
        return EXIT_CONFIG
    sched = Scheduler(
        dsn,
        name=args.name,
        settings=replace(
            DEFAULTS,
            standby_retry=args.standby_retry,
            max_sleep=args.max_sleep,
            min_wake_interval=args.min_wake_interval,
        ),
        log=log,
    )

    def _stop(signum, frame):
        if sched.stop.is_set():  # a second signal: leave at once, the lock with the session
            exit_at_once(
                128 + signum, log, "exiting at once", signal=signal.Signals(signum).name, reason="second signal"
            )
        sched.stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        return sched.run()
    except ConfigError as e:
        startup_error(log, "scrinalia-scheduler", args.json, e)
        return EXIT_CONFIG
