"""A reference runner: claim a run, keep its lease alive, run the handler, report.

    python -m scrinalia_workers.runner --handlers mypkg.handlers [--json]

The handlers module exposes HANDLERS: dict[worker_name, callable(run: dict)]; a
handler under "*" takes the runs of every worker the others do not name. The
runner never retries: a failure is reported FAILED and the scheduler decides. A
heartbeat that answers SW020 (lease lost) means another party owns the run now:
the runner drops it without reporting.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import os
import signal
import socket
import sys
import threading
import time
import traceback
from datetime import timedelta
from typing import Any, Callable

import psycopg
from psycopg.rows import dict_row

from . import db
from .errors import LEASE_LOST, ConfigError, SchemaMismatch
from .logs import EventLog, one_line, startup_error
from .schema import preflight

Handler = Callable[[dict], Any]
MAX_IDLE = 5.0


def describe_failure(exc: BaseException) -> tuple[str, str]:
    """(error text, fingerprint): type + message + traceback tail; type + location hashed."""
    tb = traceback.extract_tb(exc.__traceback__)
    tail = "".join(traceback.format_list(tb[-3:]))
    text = f"{type(exc).__name__}: {exc}\n{tail}".strip()
    where = f"{tb[-1].filename}:{tb[-1].name}:{tb[-1].lineno}" if tb else ""
    fp = hashlib.sha1(f"{type(exc).__module__}.{type(exc).__qualname__}@{where}".encode()).hexdigest()[:16]
    return text, fp


ANY_WORKER = "*"  # a handler registered under "*" takes the runs of every worker


class Runner:
    def __init__(self, dsn: str, handlers: dict[str, Handler] | None = None, runner_id: str | None = None,
                 lease: timedelta = timedelta(seconds=30), workers: list[str] | None = None,
                 log: EventLog | None = None):
        self.dsn = dsn
        self.handlers = dict(handlers or {})
        self.runner_id = runner_id or f"{socket.gethostname()}:{os.getpid()}"
        self.lease = lease
        self._workers = workers
        self.log = log or EventLog()
        self.conn: psycopg.Connection | None = None

    def handler(self, worker_name: str):
        def register(fn: Handler) -> Handler:
            self.handlers[worker_name] = fn
            return fn
        return register

    @property
    def workers(self) -> list[str] | None:
        """The worker names to claim for; None (every worker) with a "*" handler."""
        if self._workers:
            return self._workers
        return None if ANY_WORKER in self.handlers else sorted(self.handlers)

    def _connect(self) -> psycopg.Connection:
        if self.conn is None or self.conn.closed:
            self.conn = db.connect(self.dsn, application_name=f"scrinalia-runner {self.runner_id}")
            self.conn.execute("LISTEN scrinalia_runs")
        return self.conn

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def run_once(self) -> dict | None:
        """Claims and runs one run; returns the claimed row (with 'outcome') or None."""
        conn = self._connect()
        cur = conn.cursor(row_factory=dict_row)
        run = cur.execute("SELECT * FROM scrinalia.claim_next(%s, %s, %s)",
                          (self.runner_id, self.lease, self.workers)).fetchone()
        if run is None:
            return None
        self.log("claimed", run_id=run["run_id"], worker=run["worker_name"], trigger=run["trigger"],
                 attempt=run["attempt"])
        lost = threading.Event()
        done = threading.Event()
        hb = threading.Thread(target=self._heartbeat, args=(run, lost, done), daemon=True)
        hb.start()
        error = None
        try:
            (self.handlers.get(run["worker_name"]) or self.handlers[ANY_WORKER])(dict(run))
        except Exception as e:
            error = describe_failure(e)
        finally:
            done.set()
            hb.join()
        if lost.is_set():
            run["outcome"] = "LEASE_LOST"
            return run
        status = "FAILED" if error else "SUCCEEDED"
        try:
            conn.execute("SELECT scrinalia.finish(%s, %s, %s, %s, %s)",
                         (run["run_id"], run["lease_token"], status,
                          error[0] if error else None, error[1] if error else None))
        except psycopg.Error as e:
            if e.sqlstate != LEASE_LOST:
                raise
            self.log("lease lost", level="warning", run_id=run["run_id"], reason=e.diag.message_primary)
            run["outcome"] = "LEASE_LOST"
            return run
        self.log("finished", run_id=run["run_id"], worker=run["worker_name"], status=status,
                 **({"error": error[0].splitlines()[0], "fingerprint": error[1]} if error else {}))
        run["outcome"] = status
        return run

    def _heartbeat(self, run: dict, lost: threading.Event, done: threading.Event) -> None:
        interval = max(self.lease.total_seconds() / 3, 0.2)
        conn = None
        while not done.wait(interval):
            try:
                if conn is None or conn.closed:
                    conn = db.connect(self.dsn, application_name=f"scrinalia-runner {self.runner_id} heartbeat")
                conn.execute("SELECT scrinalia.heartbeat(%s, %s)", (run["run_id"], run["lease_token"]))
            except psycopg.Error as e:
                if e.sqlstate == LEASE_LOST:
                    self.log("lease lost", level="warning", run_id=run["run_id"],
                             reason=e.diag.message_primary)
                    lost.set()
                    break
                self.log("heartbeat error", level="warning", run_id=run["run_id"],
                         reason=one_line(e))
                if conn is not None:
                    conn.close()
                conn = None
            except ConfigError as e:
                self.log("heartbeat error", level="warning", run_id=run["run_id"], reason=str(e))
        if conn is not None:
            conn.close()

    def _idle(self, stop: threading.Event) -> None:
        conn = self._connect()
        wait = conn.execute("SELECT extract(epoch FROM scrinalia.next_claimable_at(%s) - now())",
                            (self.workers,)).fetchone()[0]
        delay = MAX_IDLE if wait is None else min(max(float(wait), 0.01), MAX_IDLE)
        deadline = time.monotonic() + delay
        while not stop.is_set() and (left := deadline - time.monotonic()) > 0:
            for _ in conn.notifies(timeout=min(left, 0.5), stop_after=1):
                return

    def run_forever(self, stop: threading.Event) -> None:
        backoff = 0.2
        self.log("runner started", runner_id=self.runner_id, workers=",".join(self.workers or [ANY_WORKER]))
        while not stop.is_set():
            try:
                if self.run_once() is None:
                    self._idle(stop)
                backoff = 0.2
            except (psycopg.OperationalError, ConfigError) as e:
                self.log("database unavailable", level="warning",
                         reason=one_line(e))
                self.close()
                stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)
        self.log("stopping", runner_id=self.runner_id)
        self.close()


def load_handlers(module: str) -> dict[str, Handler]:
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        raise ConfigError(f"cannot import handlers module {module!r}: {e}") from None
    handlers = getattr(mod, "HANDLERS", None)
    if not isinstance(handlers, dict) or not handlers:
        raise ConfigError(f"handlers module {module!r} has no HANDLERS dict of worker name -> callable")
    return handlers


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="scrinalia-runner", description="the reference runner")
    p.add_argument("--dsn", help="database (else DATABASE_URL or the PG* variables)")
    p.add_argument("--handlers", default="scrinalia_workers.demo", metavar="MODULE")
    p.add_argument("--runner-id")
    p.add_argument("--lease", type=float, default=30.0, metavar="SECONDS")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    log = EventLog(json_lines=args.json)
    try:
        if not 1 <= args.lease <= 86400:
            raise ConfigError("--lease must be between 1 and 86400 seconds")
        handlers = load_handlers(args.handlers)
        dsn = preflight(args.dsn, "scrinalia-runner check")
    except (ConfigError, SchemaMismatch) as e:
        startup_error(log, "scrinalia-runner", args.json, e)
        return 2
    runner = Runner(dsn, handlers, runner_id=args.runner_id, lease=timedelta(seconds=args.lease), log=log)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: stop.set())
    signal.signal(signal.SIGINT, lambda *a: stop.set())
    runner.run_forever(stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
