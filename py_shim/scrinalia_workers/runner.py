"""A reference runner: claim with a lease, heartbeat while the handler runs, report.

    python -m scrinalia_workers.runner --dsn postgresql://runner@db/archive --handlers my.handlers

Copy it freely: everything it does is three stored functions. It claims the oldest
claimable run of the workers it has handlers for (``scrinalia.claim_next``: the
``not_before`` of a retry in its backoff is honoured there), keeps the lease alive
from a second connection while the handler works (``scrinalia.heartbeat``), and
reports SUCCEEDED or FAILED with the exception and a fingerprint
(``scrinalia.finish``). It never retries: a failed scheduled run is retried by the
scheduler, as a new row. When a heartbeat says the lease was lost (SQLSTATE SW020:
it expired and was reaped, for instance) the run is no longer this runner's and it
does not report it. Idle, it sleeps until the next run becomes claimable, woken
early by NOTIFY scrinalia_runs.

A handler is a callable taking the run (a dict: run_id, worker_name, request, config,
attempt, trigger, scheduled_for); returning means success, raising means failure.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import os
import select
import signal
import socket
import sys
import threading
import traceback
from datetime import timedelta
from typing import Any, Callable, Mapping

import psycopg
from psycopg.rows import dict_row

from .db import connect, require_dsn
from .errors import LEASE_LOST, ConfigError, SchemaMismatch
from .logs import EventLog
from .schema import check_schema

Handler = Callable[[dict], Any]
ANY_WORKER = "*"  # a handler registered under "*" takes every worker's runs


def fingerprint(exc: BaseException) -> str:
    """The exception type and where it was raised: equal for the same failure."""
    tb = traceback.extract_tb(exc.__traceback__)
    where = f"{tb[-1].filename}:{tb[-1].lineno}" if tb else ""
    return hashlib.sha1(f"{type(exc).__module__}.{type(exc).__qualname__}@{where}".encode()).hexdigest()[:16]


def describe(exc: BaseException, limit: int = 4000) -> str:
    lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
    head = f"{type(exc).__name__}: {exc}"
    tail = "".join(lines[-4:]).strip()
    return f"{head}\n{tail}"[:limit]


class Runner:
    def __init__(self, dsn: str, handlers: Mapping[str, Handler], *, runner_id: str | None = None,
                 lease: timedelta = timedelta(seconds=30), max_idle: float = 5.0,
                 log: EventLog | None = None):
        if not handlers:
            raise ConfigError("a runner needs at least one handler")
        self.dsn = dsn
        self.handlers = dict(handlers)
        self.runner_id = runner_id or f"{socket.gethostname()}:{os.getpid()}"
        self.lease = lease
        self.max_idle = max_idle
        self.log = log or EventLog("runner")
        self.stopping = threading.Event()
        self.workers = None if ANY_WORKER in self.handlers else sorted(self.handlers)
        self._conn: psycopg.Connection | None = None
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)

    def stop(self, *_args) -> None:
        self.stopping.set()
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    # -- connections ----------------------------------------------------------------

    def _connection(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed:
            self._conn = connect(self.dsn, application_name=f"scrinalia-runner {self.runner_id}"[:63])
            check_schema(self._conn)
            self._conn.execute("LISTEN scrinalia_runs")
        return self._conn

    def _drop_connection(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # noqa: BLE001 - closing a broken connection
                pass
        self._conn = None

    # -- the loop -------------------------------------------------------------------

    def run_forever(self) -> None:
        backoff = 0.5
        while not self.stopping.is_set():
            try:
                if not self.run_once():
                    self._idle()
                backoff = 0.5
            except (psycopg.OperationalError, ConfigError) as e:
                self.log("connection lost", error=" ".join(str(e).split()), retry_in=backoff)
                self._drop_connection()
                self._wait(backoff)
                backoff = min(backoff * 2, 5.0)
        self._drop_connection()
        self.log("stopping", runner=self.runner_id)

    def run_once(self) -> bool:
        """Claims and processes one run; False when there was none to claim."""
        conn = self._connection()
        cur = conn.cursor(row_factory=dict_row)
        run = cur.execute(
            "SELECT run_id, lease_token, worker_name, request, config, attempt, trigger, scheduled_for "
            "FROM scrinalia.claim_next(%s, %s, %s)",
            (self.runner_id, self.lease, self.workers),
        ).fetchone()
        if run is None:
            return False
        self.log("claimed", run_id=run["run_id"], worker=run["worker_name"], trigger=run["trigger"],
                 attempt=run["attempt"])
        self._process(conn, run)
        return True

    def _process(self, conn: psycopg.Connection, run: dict) -> None:
        handler = self.handlers.get(run["worker_name"]) or self.handlers[ANY_WORKER]
        token = run.pop("lease_token")
        lost = threading.Event()
        done = threading.Event()
        beat = threading.Thread(target=self._heartbeat, args=(run["run_id"], token, lost, done),
                                name=f"heartbeat-{run['run_id']}", daemon=True)
        beat.start()
        error = None
        try:
            handler(run)
        except Exception as e:  # noqa: BLE001 - any failure of the handler is reported
            error = e
        finally:
            done.set()
            beat.join()
        if lost.is_set():
            self.log("not reported", run_id=run["run_id"], reason="lease lost")
            return
        try:
            if error is None:
                conn.execute("SELECT scrinalia.finish(%s, %s, 'SUCCEEDED')", (run["run_id"], token))
                self.log("succeeded", run_id=run["run_id"], worker=run["worker_name"])
            else:
                conn.execute("SELECT scrinalia.finish(%s, %s, 'FAILED', %s, %s)",
                             (run["run_id"], token, describe(error), fingerprint(error)))
                self.log("failed", run_id=run["run_id"], worker=run["worker_name"],
                         error=f"{type(error).__name__}: {error}")
        except psycopg.Error as e:
            if e.sqlstate != LEASE_LOST:
                raise
            self.log("not reported", run_id=run["run_id"], reason=e.diag.message_primary)

    def _heartbeat(self, run_id: int, token, lost: threading.Event, done: threading.Event) -> None:
        every = max(self.lease.total_seconds() / 3, 0.2)
        conn = None
        try:
            while not done.wait(every):
                try:
                    if conn is None:
                        conn = connect(self.dsn, application_name=f"scrinalia-runner heartbeat {run_id}")
                    conn.execute("SELECT scrinalia.heartbeat(%s, %s)", (run_id, token))
                except psycopg.Error as e:
                    if e.sqlstate == LEASE_LOST:
                        self.log("lease lost", run_id=run_id, reason=e.diag.message_primary)
                        lost.set()
                        return
                    self.log("heartbeat failed", run_id=run_id, error=" ".join(str(e).split()))
                    conn = None  # reconnect at the next beat; the lease has some slack
                except ConfigError as e:
                    self.log("heartbeat failed", run_id=run_id, error=str(e))
        finally:
            if conn is not None:
                conn.close()

    def _idle(self) -> None:
        conn = self._connection()
        wait = conn.execute(
            "SELECT extract(epoch FROM scrinalia.next_claimable_at(%s) - clock_timestamp())", (self.workers,)
        ).fetchone()[0]
        seconds = self.max_idle if wait is None else max(0.0, min(float(wait), self.max_idle))
        if seconds <= 0:
            seconds = 0.05  # claimable but taken by another runner: look again shortly
        ready, _, _ = select.select([conn.fileno(), self._wake_r], [], [], seconds)
        if self._wake_r in ready:
            try:
                self._wake_r.recv(512)
            except BlockingIOError:
                pass
        if conn.fileno() in ready:
            for _ in conn.notifies(timeout=0.0):
                pass

    def _wait(self, seconds: float) -> None:
        self.stopping.wait(seconds)


def load_handlers(module_name: str) -> dict[str, Handler]:
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"cannot import the handlers module {module_name!r}: {e}") from None
    handlers = getattr(module, "HANDLERS", None)
    if not isinstance(handlers, Mapping) or not handlers:
        raise ConfigError(f"{module_name} has no HANDLERS mapping of worker name to callable")
    return dict(handlers)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="scrinalia-runner", description=__doc__.split("\n\n")[0])
    p.add_argument("--dsn", help="libpq DSN or URL (default: DATABASE_URL or the PG* variables)")
    p.add_argument("--handlers", default=os.environ.get("SCRINALIA_HANDLERS", "scrinalia_workers.demo_handlers"),
                   help="module exposing HANDLERS = {worker_name: callable} (default: the demo's)")
    p.add_argument("--runner-id", help="recorded as the lease owner (default host:pid)")
    p.add_argument("--lease", type=float, default=float(os.environ.get("SCRINALIA_LEASE", 30)),
                   help="lease in seconds, renewed every third of it (default 30)")
    p.add_argument("--max-idle", type=float, default=5.0, help="longest idle sleep under NOTIFY (default 5)")
    p.add_argument("--json", action="store_true", default=os.environ.get("SCRINALIA_LOG_JSON") == "1",
                   help="log JSON objects, one per line")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    log = EventLog("runner", as_json=args.json)
    try:
        if not 1 <= args.lease <= 86400:
            raise ConfigError("--lease is between 1 and 86400 seconds")
        runner = Runner(require_dsn(args.dsn), load_handlers(args.handlers), runner_id=args.runner_id,
                        lease=timedelta(seconds=args.lease), max_idle=args.max_idle, log=log)
        with connect(runner.dsn, application_name="scrinalia-runner check") as conn:
            check_schema(conn)
    except (ConfigError, SchemaMismatch) as e:
        log("error", error=str(e))
        print(f"scrinalia-runner: error: {e}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, runner.stop)
    signal.signal(signal.SIGINT, runner.stop)
    log("started", runner=runner.runner_id, workers=",".join(runner.workers or ["*"]))
    runner.run_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
