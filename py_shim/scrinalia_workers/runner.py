"""The reference runner: claim a run, keep its lease alive, run the handler, report.

    scrinalia-runner --handlers mypkg.handlers [--lease 30] [--grace 30] [--json]

The handler contract is docs/handlers.md. The runner never retries: a failure is
reported FAILED and the scheduler decides. A heartbeat that answers SW020 (lease
lost) means another party owns the run now: the runner drops it without reporting.

Threads: the main thread claims, heartbeats (every lease/3, on the runner's one
connection, which is idle while a handler runs), reports, and handles signals; one
long-lived handler thread calls the handlers. SIGTERM/SIGINT: stop claiming, give the running
handler --grace seconds, then report the run INTERRUPTED "runner shut down" (the
retry policy applies as to a reaped lease) and exit 0. A second signal exits at once
with 128 + the signal number; the run is then left to its lease.
"""

from __future__ import annotations

import argparse
import math
import os
import queue
import re
import select
import signal
import socket
import sys
import threading
import time
from datetime import timedelta
from typing import NamedTuple

import psycopg
from psycopg.rows import dict_row

from . import argtypes, db
from .backoff import Backoff, is_transient
from .errors import LEASE_LOST, ConfigError, DatabaseUnavailable, MissingPrivilege
from .failure import printable
from .handlers import ANY_WORKER, Handler, Outcome, call, handler_for, load_handlers
from .logs import EventLog, one_line, startup_error
from .schema import preflight

MAX_IDLE = 5.0           # an idle runner re-checks next_claimable_at at least this often
# Any login can NOTIFY scrinalia_runs: an idle runner woken by a NOTIFY claims at most
# once per this interval, however many arrive (a flood costs 20 claims a second, not
# one per message); a backlog is drained without it (a claimed run is followed by the
# next claim at once).
MIN_WAKE_INTERVAL = 0.05
SHUTDOWN_ERROR = "runner shut down"
SHUTDOWN_FINGERPRINT = "runner-shutdown"

# A runner id: what scrinalia.check_runner accepts (docs/sql-api.md, claim_next).
RUNNER_ID = re.compile(r"[A-Za-z0-9_.:@/-]{1,200}")
LEASE_RANGE = (1.0, 86400.0)   # check_runner: 1 second .. 1 day
GRACE_RANGE = (0.1, 3600.0)

# What a runner calls, by exact signature (types of the scrinalia schema unqualified);
# membership in scrinalia_runner grants them (sql/90_roles.sql).
RUNNER_GROUP = "scrinalia_runner"
RUNNER_FUNCTIONS = (
    "claim_next(text, interval, text[])",
    "heartbeat(bigint, uuid)",
    "finish(bigint, uuid, run_status, text, text)",
    "next_claimable_at(text[])",
)


class _Done(NamedTuple):
    """A handler's outcome, posted by the handler thread."""
    run_id: int
    outcome: Outcome


class _Wakeup:
    """A self-pipe: what wakes the main thread. The handler thread rings it when a
    handler returns; signal.set_wakeup_fd makes the C-level signal handler ring it,
    so a signal that lands just before the main thread blocks is never missed (a
    Python-level handler alone may run only when the wait times out)."""

    def __init__(self):
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)
        os.set_blocking(self.write_fd, False)

    def ring(self) -> None:
        try:
            os.write(self.write_fd, b"\0")
        except OSError:  # full (it will wake anyway) or closed
            pass

    def wait(self, timeout: float | None, also: int | None = None) -> bool:
        """Returns when rung, or after timeout seconds; or when the file descriptor
        `also` is readable, and then True."""
        fds = [self.read_fd] if also is None else [self.read_fd, also]
        try:
            ready, _, _ = select.select(fds, [], [], timeout)
        except (OSError, ValueError):
            return False
        if self.read_fd in ready:
            try:
                while os.read(self.read_fd, 4096):
                    pass
            except OSError:  # drained (BlockingIOError)
                pass
        return also is not None and also in ready


def default_runner_id() -> str:
    host = re.sub(r"[^A-Za-z0-9_.:@/-]", "-", socket.gethostname())[:180] or "runner"
    return f"{host}:{os.getpid()}"


class _HandlerThread:
    """One long-lived daemon thread that calls handlers; it posts each outcome to
    `done` and rings `wakeup`."""

    def __init__(self, done: queue.SimpleQueue, wakeup: _Wakeup):
        self._done = done
        self._wakeup = wakeup
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self.busy = False

    def submit(self, run_id: int, handler: Handler, run: dict) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="scrinalia-handler", daemon=True)
            self._thread.start()
        self.busy = True
        self._jobs.put((run_id, handler, run))

    def _loop(self) -> None:
        while True:
            run_id, handler, run = self._jobs.get()
            try:
                outcome = call(handler, run)
            except BaseException:  # call() does not raise; this thread must never die silently
                outcome = Outcome("FAILED", "the runner could not describe the failure", "runner-internal")
            self.busy = False
            self._done.put(_Done(run_id, outcome))
            self._wakeup.ring()


class Runner:
    def __init__(self, dsn: str, handlers: dict[str, Handler] | None = None, runner_id: str | None = None,
                 lease: timedelta = timedelta(seconds=30), workers: list[str] | None = None,
                 log: EventLog | None = None, grace: float = 30.0):
        self.dsn = dsn
        self.handlers = dict(handlers or {})
        self.runner_id = runner_id or default_runner_id()
        self.lease = lease
        self.grace = grace
        self._workers = workers
        self.log = log or EventLog()
        self.conn: psycopg.Connection | None = None
        self.wakeup = _Wakeup()
        self._done: queue.SimpleQueue = queue.SimpleQueue()
        self._handler_thread = _HandlerThread(self._done, self.wakeup)
        self._backoff = Backoff()
        self.claim_attempts = 0
        self._last_claim = 0.0
        self.stopping = False
        self._signals = 0

    @property
    def workers(self) -> list[str] | None:
        """The worker names to claim for; None (every worker) with a "*" handler."""
        if self._workers:
            return self._workers
        return None if ANY_WORKER in self.handlers else sorted(self.handlers)

    @property
    def handler_busy(self) -> bool:
        return self._handler_thread.busy

    # -- signals -----------------------------------------------------------------

    def on_signal(self, signum: int, frame=None) -> None:
        """First SIGTERM/SIGINT: stop after the grace. Second: exit at once."""
        self._signals += 1
        if self._signals > 1:
            try:  # the main thread may have been inside a log write: never let that stop us
                self.log("exiting at once", level="warning", signal=signal.Signals(signum).name,
                         reason="second signal; a running run is left to its lease")
            finally:
                os._exit(128 + signum)
        self.stopping = True
        self.wakeup.ring()  # in case the C-level ring was drained before this ran

    def request_stop(self) -> None:
        self.stopping = True
        self.wakeup.ring()

    # -- the connection ------------------------------------------------------------

    def _connect(self) -> psycopg.Connection:
        if self.conn is None or self.conn.closed or self.conn.broken:
            self.close()
            # DatabaseUnavailable when the server is away: run_forever backs off and retries
            self.conn = db.connect(self.dsn, application_name=f"scrinalia-runner {self.runner_id}")
            self.conn.execute("LISTEN scrinalia_runs")
        return self.conn

    def close(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:
                pass
            self.conn = None

    # -- one run -------------------------------------------------------------------

    def run_once(self) -> dict | None:
        """Claims and runs one run; returns the claimed row (with 'outcome') or None."""
        conn = self._connect()
        cur = conn.cursor(row_factory=dict_row)
        self.claim_attempts += 1
        self._last_claim = time.monotonic()
        run = cur.execute("SELECT * FROM scrinalia.claim_next(%s, %s, %s)",
                          (self.runner_id, self.lease, self.workers)).fetchone()
        if run is None:
            return None
        self._backoff.reset()
        self.log("claimed", run_id=run["run_id"], worker=run["worker_name"], trigger=run["trigger"],
                 attempt=run["attempt"])
        handler = handler_for(self.handlers, run["worker_name"])
        if handler is None:  # Runner(workers=...) named a worker no handler takes
            outcome: Outcome | None = Outcome("FAILED", f"no handler for worker {run['worker_name']}",
                                              "no-handler")
            lost = False
        else:
            self._handler_thread.submit(run["run_id"], handler, run)
            outcome, lost = self._supervise(run)
        if lost:
            run["outcome"] = "LEASE_LOST"
        elif outcome is None:  # the grace ran out
            run["outcome"] = self._report(run, "INTERRUPTED", SHUTDOWN_ERROR, SHUTDOWN_FINGERPRINT)
        else:
            run["outcome"] = self._report(run, outcome.status, outcome.error, outcome.fingerprint,
                                          outcome.summary)
        return run

    def _supervise(self, run: dict) -> tuple[Outcome | None, bool]:
        """Waits for the handler, heartbeating; (outcome or None when the grace ran out, lease lost)."""
        interval = max(self.lease.total_seconds() / 3, 0.2)
        next_beat = time.monotonic() + interval
        grace_ends = None
        lost = False
        while True:
            try:
                done = self._done.get_nowait()
            except queue.Empty:
                done = None
            if done is not None and done.run_id == run["run_id"]:
                return done.outcome, lost
            now = time.monotonic()
            if self.stopping and grace_ends is None:
                grace_ends = now + self.grace
                self.log("stopping", run_id=run["run_id"], grace=self.grace,
                         reason="waiting for the running handler")
            if self.stopping and lost:
                return None, True  # nothing left to report: no reason to wait for the handler
            if grace_ends is not None and now >= grace_ends:
                self.log("grace over", level="warning", run_id=run["run_id"], grace=self.grace)
                return None, False
            if not lost and now >= next_beat:
                lost = not self._heartbeat(run)
                next_beat = time.monotonic() + interval
                continue
            deadlines = ([grace_ends] if grace_ends is not None else []) + ([] if lost else [next_beat])
            self.wakeup.wait(max(min(deadlines) - now, 0) if deadlines else None)

    def _heartbeat(self, run: dict) -> bool:
        """Extends the lease; False when it is lost. Never raises: a failed heartbeat is
        logged and tried again (once at once on a new connection, then next beat)."""
        for _ in range(2):
            try:
                self._connect().execute("SELECT scrinalia.heartbeat(%s, %s)", (run["run_id"], run["lease_token"]))
                return True
            except psycopg.Error as e:
                if e.sqlstate == LEASE_LOST:
                    self.log("lease lost", level="warning", run_id=run["run_id"], reason=e.diag.message_primary)
                    return False
                self.log("heartbeat error", level="warning", run_id=run["run_id"], reason=one_line(e))
                if not is_transient(e):
                    return True
                self.close()
            except Exception as e:  # DatabaseUnavailable (no server), or anything else
                self.log("heartbeat error", level="warning", run_id=run["run_id"], reason=one_line(e))
                return True
        return True

    def _report(self, run: dict, status: str, error: str | None, fingerprint: str | None,
                summary: str | None = None) -> str:
        """finish(); returns the outcome. Transient errors are retried until the lease
        would be gone; after that the reaper ends the run and the retry policy applies."""
        # shutting down, the container's stop timeout is near: a few seconds, not a lease
        give_up = time.monotonic() + min(self.lease.total_seconds(), 5.0 if self.stopping else math.inf)
        backoff = Backoff(base=0.1, cap=2.0)
        retried = False
        while True:
            try:
                self._finish(run, status, error, fingerprint)
                break
            except psycopg.Error as e:
                reason = e.diag.message_primary or ""
                if e.sqlstate == LEASE_LOST and retried and reason.endswith(f"the run is {status}"):
                    break  # the first finish() committed; only its answer was lost
                if e.sqlstate == LEASE_LOST:
                    self.log("lease lost", level="warning", run_id=run["run_id"], reason=reason)
                    return "LEASE_LOST"
                if not is_transient(e):
                    raise
                reason = one_line(e)
            except DatabaseUnavailable as e:
                reason = one_line(e)
            self.close()
            if time.monotonic() >= give_up:
                self.log("report abandoned", level="error", run_id=run["run_id"], status=status,
                         reason=f"database unavailable for the lease's length: {reason}")
                return "UNREPORTED"
            self.log("database unavailable", level="warning", run_id=run["run_id"], reason=reason)
            time.sleep(backoff.next_delay())
            retried = True
        fields = {}
        if error:
            fields = {"error": error.splitlines()[0][:500], "fingerprint": fingerprint}
        elif summary:
            fields = {"summary": summary}
        self.log("interrupted" if status == "INTERRUPTED" else "finished", run_id=run["run_id"],
                 worker=run["worker_name"], status=status, **fields)
        return status

    def _finish(self, run: dict, status: str, error: str | None, fingerprint: str | None) -> None:
        conn = self._connect()
        args = (run["run_id"], run["lease_token"], status)
        try:
            conn.execute("SELECT scrinalia.finish(%s, %s, %s, %s, %s)", (*args, error, fingerprint))
        except (psycopg.errors.DataException, UnicodeEncodeError):
            # the text does not fit the database's encoding (a LATIN1 database and a
            # Chinese file name; psycopg refuses it, or the server): store it
            # ASCII-escaped rather than not at all
            conn.execute("SELECT scrinalia.finish(%s, %s, %s, %s, %s)",
                         (*args, error.encode("ascii", "backslashreplace").decode("ascii") if error else None,
                          fingerprint))

    # -- the loop ------------------------------------------------------------------

    def _idle(self) -> None:
        conn = self._connect()
        wait = conn.cursor(row_factory=dict_row).execute(
            "SELECT extract(epoch FROM scrinalia.next_claimable_at(%s) - now()) AS wait",
            (self.workers,)).fetchone()["wait"]
        delay = MAX_IDLE if wait is None else min(max(float(wait), 0.01), MAX_IDLE)
        # notifications that came in during a long run wait in psycopg's backlog: one
        # claim attempt answers them all, not one attempt each
        if sum(1 for _ in conn.notifies(timeout=0)):
            return self._coalesce(conn)
        deadline = time.monotonic() + delay
        while not self.stopping and (left := deadline - time.monotonic()) > 0:
            # the connection's socket (a NOTIFY) or the wake-up pipe (a signal)
            if self.wakeup.wait(left, also=conn.fileno()) and sum(1 for _ in conn.notifies(timeout=0)):
                return self._coalesce(conn)

    def _coalesce(self, conn) -> None:
        """After a NOTIFY: wait out MIN_WAKE_INTERVAL since the last claim, folding
        every NOTIFY that arrives meanwhile into the one claim that follows."""
        self._pause(self._last_claim + MIN_WAKE_INTERVAL - time.monotonic())
        sum(1 for _ in conn.notifies(timeout=0))

    def _pause(self, seconds: float) -> None:
        """Sleeps, unless a stop request comes first."""
        deadline = time.monotonic() + seconds
        while not self.stopping and (left := deadline - time.monotonic()) > 0:
            self.wakeup.wait(left)

    def run_forever(self) -> None:
        """Claims until stopped. Transient database errors: log, back off, reconnect.
        ConfigError (a lost grant included) propagates: one line, exit 2."""
        self.log("runner started", runner_id=self.runner_id, workers=",".join(self.workers or [ANY_WORKER]),
                 lease=self.lease.total_seconds(), grace=self.grace)
        try:
            while not self.stopping:
                try:
                    if self.run_once() is None:
                        self._idle()
                    self._backoff.reset()
                except ConfigError:
                    raise  # misconfiguration: one line and exit 2, never retried
                except psycopg.errors.InsufficientPrivilege as e:
                    raise MissingPrivilege(f"login lost a privilege: {e.diag.message_primary}") from None
                except (psycopg.Error, DatabaseUnavailable) as e:
                    transient = is_transient(e)
                    self.log("database unavailable" if transient else "database error",
                             level="warning" if transient else "error", reason=one_line(e))
                    self.close()
                    self._pause(self._backoff.next_delay())
                except Exception as e:  # a bug of ours: say so, back off, never crash-loop
                    self.log("runner error", level="error", reason=f"{type(e).__name__}: {one_line(e)}")
                    self.close()
                    self._pause(self._backoff.next_delay())
        finally:
            self.close()
        self.log("stopped", runner_id=self.runner_id, claim_attempts=self.claim_attempts)


# -- start-up ----------------------------------------------------------------------

class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        """One line and exit 2: no usage block, never a traceback."""
        self.exit(2, f"{self.prog}: {' '.join(message.split())}\n")


def _runner_id(value: str) -> str:
    if not RUNNER_ID.fullmatch(value):
        raise argparse.ArgumentTypeError(
            f"invalid runner id {printable(value[:100])!r}: 1 to 200 ASCII letters, digits or _ . : @ / -")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = _Parser(prog="scrinalia-runner", description="the reference runner (handler contract: docs/handlers.md)")
    p.add_argument("--dsn", help="database (else DATABASE_URL or the PG* variables)")
    p.add_argument("--handlers", metavar="MODULE", required=False,
                   help="the module whose HANDLERS dict maps worker names to handlers (required)")
    p.add_argument("--runner-id", type=_runner_id, help="1 to 200 of A-Z a-z 0-9 _ . : @ / - (default host:pid)")
    p.add_argument("--lease", type=argtypes.seconds(*LEASE_RANGE), default=30.0, metavar="SECONDS",
                   help="lease of a claimed run; the runner heartbeats every lease/3 (default 30)")
    p.add_argument("--grace", type=argtypes.seconds(*GRACE_RANGE), default=30.0, metavar="SECONDS",
                   help="on SIGTERM/SIGINT, how long the running handler may still take (default 30)")
    p.add_argument("--json", action="store_true", help="log JSON lines")
    args = p.parse_args(argv)
    if not args.handlers:
        p.error("--handlers MODULE is required (the demo's is scrinalia_workers.demo_handlers)")
    return args


def _exit_now(signum: int, frame=None) -> None:
    """A signal during start-up: nothing claimed, nothing to report, no traceback."""
    os._exit(128 + signum)


def _start(args: argparse.Namespace, log: EventLog) -> Runner:
    """The runner, once its handlers load and its database and login check out."""
    handlers = load_handlers(args.handlers)
    dsn = preflight(args.dsn, "scrinalia-runner check", functions=RUNNER_FUNCTIONS,
                    job="claim runs", groups=(RUNNER_GROUP,))
    return Runner(dsn, handlers, runner_id=args.runner_id, lease=timedelta(seconds=args.lease),
                  grace=args.grace, log=log)


def _lingering_threads(runner: Runner) -> bool:
    """A handler still running, or threads a handler started and left behind."""
    return runner.handler_busy or any(
        t.is_alive() and not t.daemon and t is not threading.main_thread() for t in threading.enumerate())


def _log_stray_errors(log: EventLog) -> None:
    """Errors in threads a handler started, or in its objects' __del__, become one log
    line each rather than a traceback on stderr (which would break --json's lines)."""
    from .failure import describe_failure

    def thread_error(args) -> None:
        if args.exc_value is not None:
            text, fp = describe_failure(args.exc_value)
            log("thread error", level="warning", thread=printable(getattr(args.thread, "name", "?")),
                error=text.splitlines()[0][:500], fingerprint=fp)

    def unraisable(u) -> None:
        if u.exc_value is not None:
            text, fp = describe_failure(u.exc_value)
            log("unraisable error", level="warning", error=text.splitlines()[0][:500], fingerprint=fp)

    threading.excepthook = thread_error
    sys.unraisablehook = unraisable


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    log = EventLog(json_lines=args.json)
    _log_stray_errors(log)
    previous = {sig: signal.signal(sig, _exit_now) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        try:
            runner = _start(args, log)
        except ConfigError as e:
            startup_error(log, "scrinalia-runner", args.json, e)
            return 2
        for sig in previous:
            signal.signal(sig, runner.on_signal)
        signal.set_wakeup_fd(runner.wakeup.write_fd, warn_on_full_buffer=False)
        code = 0
        try:
            runner.run_forever()
        except ConfigError as e:  # a grant lost while running
            startup_error(log, "scrinalia-runner", args.json, e)
            code = 2
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


if __name__ == "__main__":
    sys.exit(main())
