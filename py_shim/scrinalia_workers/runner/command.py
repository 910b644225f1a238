"""scrinalia-runner's command line: its flags, its start-up checks, its signals, its exit code.

Exit codes: 0 after a stop (SIGTERM/SIGINT); 2 for a misconfiguration, at start-up or
a grant lost while running (one line, never a traceback); 3 when every handler thread
is held by a run told to stop that did not return within --grace; 128 + the signal
number for a signal during start-up or a second signal.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from datetime import timedelta

import psycopg

from scrinalia_workers import __version__, argtypes, policy
from scrinalia_workers.collector import tune_for_daemon
from scrinalia_workers.errors import ConfigError, DatabaseUnavailable
from scrinalia_workers.gateway.checks import STARTUP_WAIT_MAX, preflight, startup_wait
from scrinalia_workers.gateway.connection import connect, one
from scrinalia_workers.gateway.dsn_password import warn_if_password_in_argv
from scrinalia_workers.gateway.statements.runner import RUNNER_FUNCTIONS, RUNNER_GROUP, UNREGISTERED_WORKERS
from scrinalia_workers.logs import EventLog, route_library_logs, startup_error
from scrinalia_workers.runner.batch import HandlersStuck
from scrinalia_workers.runner.daemon import DEFAULT_BATCH, DEFAULT_CONCURRENCY, Runner
from scrinalia_workers.runner.failure import describe_failure
from scrinalia_workers.runner.handlers import load_handlers
from scrinalia_workers.runner.runner_id import RUNNER_ID
from scrinalia_workers.runner.settings import DEFAULTS
from scrinalia_workers.runner.wakeup import Wakeup
from scrinalia_workers.text import printable

LEASE_RANGE = (policy.MIN_LEASE_SECONDS, policy.MAX_LEASE_SECONDS)  # check_runner's
GRACE_RANGE = (0.1, 3600.0)
BATCH_RANGE = (1, policy.MAX_CLAIM_BATCH)  # claim_runs'
CONCURRENCY_RANGE = (1, 64)  # handler threads: the runner's own bound, not the database's
# Every handler thread held by a run told to stop, past the grace: the supervisor
# (compose's restart:, systemd's Restart=on-failure) starts a fresh runner.
STUCK_EXIT = 3


def _runner_id(value: str) -> str:
    if not RUNNER_ID.fullmatch(value):
        raise argparse.ArgumentTypeError(
            f"invalid runner id {printable(value[:100])!r}: "
            f"1 to {policy.MAX_RUNNER_ID_LENGTH} ASCII letters, digits or _ . : @ / -"
        )
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argtypes.DaemonParser(
        prog="scrinalia-runner", description="the reference runner (handler contract: docs/handlers.md)"
    )
    p.add_argument("--version", action="version", version=f"scrinalia-runner {__version__}")
    p.add_argument("--dsn", help="database (else DATABASE_URL or the PG* variables)")
    p.add_argument(
        "--handlers",
        metavar="MODULE",
        required=False,
        help="the module whose HANDLERS dict maps worker names to handlers (required)",
    )
    p.add_argument(
        "--runner-id",
        type=_runner_id,
        help=f"1 to {policy.MAX_RUNNER_ID_LENGTH} of A-Z a-z 0-9 _ . : @ / - (default host:pid)",
    )
    p.add_argument(
        "--lease",
        type=argtypes.seconds(*LEASE_RANGE),
        default=30.0,
        metavar="SECONDS",
        help="lease of a claimed run; the runner heartbeats every lease/3 (default 30)",
    )
    p.add_argument(
        "--grace",
        type=argtypes.seconds(*GRACE_RANGE),
        default=30.0,
        metavar="SECONDS",
        help="on SIGTERM/SIGINT, how long the running handler may still take (default 30)",
    )
    p.add_argument(
        "--batch",
        type=argtypes.count(*BATCH_RANGE),
        default=DEFAULT_BATCH,
        metavar="N",
        help=f"claim up to N runs at once while handlers are quick (default {DEFAULT_BATCH}; 1: one run at a time)",
    )
    p.add_argument(
        "--concurrency",
        type=argtypes.count(*CONCURRENCY_RANGE),
        default=DEFAULT_CONCURRENCY,
        metavar="N",
        help=f"handler threads at most; more than one start only when handlers overrun {DEFAULTS.release_after} s "
        f"(default {DEFAULT_CONCURRENCY}; 1: one handler at a time)",
    )
    argtypes.add_wait_for_database(p, STARTUP_WAIT_MAX)
    p.add_argument("--json", action="store_true", help="log JSON lines")
    args = p.parse_args(argv)
    if not args.handlers:
        p.error("--handlers MODULE is required (the demo's is scrinalia_workers.demo.handlers)")
    return args


def _exit_now(signum: int, frame=None) -> None:
    """A signal during start-up: nothing claimed, nothing to report, no traceback."""
    os._exit(128 + signum)


def _start(args: argparse.Namespace, log: EventLog, wakeup: Wakeup) -> Runner:
    """The runner, once its handlers load and its database and login check out."""
    handlers = load_handlers(args.handlers)
    warn_if_password_in_argv(args.dsn, log)
    dsn = preflight(
        args.dsn,
        "scrinalia-runner check",
        functions=RUNNER_FUNCTIONS,
        job="claim runs",
        groups=(RUNNER_GROUP,),
        wait=startup_wait(log, args.wait_for_database),
    )
    _warn_unregistered(dsn, handlers, log)
    return Runner(
        dsn,
        handlers,
        runner_id=args.runner_id,
        lease=timedelta(seconds=args.lease),
        grace=args.grace,
        log=log,
        batch=args.batch,
        concurrency=args.concurrency,
        wakeup=wakeup,
    )


def _warn_unregistered(dsn: str, handlers: dict, log: EventLog) -> None:
    """One warning naming the handlers for workers nobody registered: their runs never come."""
    try:
        with connect(dsn, application_name="scrinalia-runner check") as conn:
            (unknown,) = one(conn.execute(UNREGISTERED_WORKERS, (sorted(handlers),)))
    except (psycopg.Error, DatabaseUnavailable, LookupError):
        return  # an older database's code, or a blip: the warning is a courtesy, not a check
    if unknown:
        log(
            "handlers for unregistered workers",
            level="warning",
            workers=",".join(printable(n) for n in unknown),
            hint="check the names in HANDLERS against `scrinalia-workers worker list`",
        )


def _lingering_threads(runner: Runner) -> bool:
    """A handler still running, or threads a handler started and left behind."""
    return runner.handler_busy or any(
        t.is_alive() and not t.daemon and t is not threading.main_thread() for t in threading.enumerate()
    )


def _log_stray_errors(log: EventLog) -> None:
    """Errors in threads a handler started, or in its objects' __del__, become one log
    line each rather than a traceback on stderr (which would break --json's lines)."""

    def thread_error(args) -> None:
        if args.exc_value is not None:
            text, fp = describe_failure(args.exc_value)
            log(
                "thread error",
                level="warning",
                thread=printable(getattr(args.thread, "name", "?")),
                error=text.splitlines()[0][:500],
                fingerprint=fp,
            )

    def unraisable(u) -> None:
        if u.exc_value is not None:
            text, fp = describe_failure(u.exc_value)
            log("unraisable error", level="warning", error=text.splitlines()[0][:500], fingerprint=fp)

    threading.excepthook = thread_error
    sys.unraisablehook = unraisable


def main(argv: list[str] | None = None) -> int:
    tune_for_daemon()
    args = parse_args(argv)
    log = EventLog(json_lines=args.json)
    _log_stray_errors(log)
    route_library_logs(log)
    previous = {sig: signal.signal(sig, _exit_now) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        wakeup = Wakeup()
        try:
            runner = _start(args, log, wakeup)
        except ConfigError as e:
            startup_error(log, "scrinalia-runner", args.json, e)
            return 2
        for sig in previous:
            signal.signal(sig, runner.on_signal)
        signal.set_wakeup_fd(wakeup.write_fd, warn_on_full_buffer=False)
        code = 0
        try:
            runner.run_forever()
        except ConfigError as e:  # a grant lost while running
            startup_error(log, "scrinalia-runner", args.json, e)
            code = 2
        except HandlersStuck as e:  # no thread left to run a handler: a fresh process frees them
            runner.ledger.report_stuck_exit()  # its RUNNER_STUCK alert outlives it
            log.last_words("exiting", level="error", reason=str(e))
            code = STUCK_EXIT
        if _lingering_threads(runner):
            # leave without waiting for them: a non-daemon thread would hold the exit
            # forever, a daemon one holding stdout's lock could abort it
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except Exception:
                    pass
            os._exit(code)
        return code
    finally:
        signal.set_wakeup_fd(-1)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
