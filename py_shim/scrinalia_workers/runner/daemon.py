"""The reference runner: claim runs, keep their leases alive, run the handlers, report.

    scrinalia-runner --handlers mypkg.handlers [--lease 30] [--grace 30] [--batch 32] [--json]

The handler contract is docs/handlers.md. The runner never retries: a failure is
reported FAILED and the scheduler decides. A heartbeat that answers lost (SW020's
reasons) means another party owns the run now: the runner drops it without reporting.

Batches: one claim_runs() call hands the runner up to --batch runs (of different
workers: a worker has one slot), which the handler thread runs one after another;
finish_runs() reports several outcomes in one call. A backlog of quick runs costs two
round trips per batch, not per run. The batch starts at one run after an idle spell
and doubles while handlers are quick. Claimed runs wait for their turn at most
RELEASE_AFTER: when a handler runs longer, the runs it holds up go back to the queue
(release_runs) for another runner, and the next claim is of one run again.

Threads: the main thread claims, heartbeats (every lease/3, one call for all the runs
it holds, on the runner's one connection), reports, and handles signals; one
long-lived handler thread calls the handlers. SIGTERM/SIGINT: stop claiming, give back
the runs not started, give the running handler --grace seconds, then report the run
INTERRUPTED "runner shut down" (the retry policy applies as to a reaped lease) and exit
0. A second signal exits at once with 128 + the signal number; the run is then left to
its lease.
"""

from __future__ import annotations

import argparse
import collections
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

from scrinalia_workers import argtypes
from scrinalia_workers.errors import ConfigError, DatabaseUnavailable, MissingPrivilege
from scrinalia_workers.gateway import connection as db
from scrinalia_workers.gateway.backoff import Backoff, is_transient
from scrinalia_workers.gateway.checks import preflight
from scrinalia_workers.logs import EventLog, one_line, startup_error
from scrinalia_workers.runner.handlers import (
    ANY_WORKER,
    Handler,
    Outcome,
    call,
    handler_for,
    load_handlers,
)
from scrinalia_workers.text import printable

MAX_IDLE = 5.0  # an idle runner re-checks next_claimable_at at least this often
# Any login can NOTIFY scrinalia_runs: an idle runner woken by a NOTIFY claims at most
# once per this interval, however many arrive (a flood costs 20 claims a second, not
# one per message); a backlog is drained without it (a claimed run is followed by the
# next claim at once).
MIN_WAKE_INTERVAL = 0.05
# Claimed runs wait behind a running handler at most this long before they are given
# back; and a batch grows only while a whole batch takes less.
RELEASE_AFTER = 0.5
# An outcome waits at most this long for the others of its batch before it is reported
# (all are reported together when the handler thread runs out of work).
REPORT_AFTER = 0.01
SHUTDOWN_ERROR = "runner shut down"
SHUTDOWN_FINGERPRINT = "runner-shutdown"

# A runner id: what scrinalia.check_runner accepts (docs/sql-api.md, claim_next).
RUNNER_ID = re.compile(r"[A-Za-z0-9_.:@/-]{1,200}")
LEASE_RANGE = (1.0, 86400.0)  # check_runner: 1 second .. 1 day
GRACE_RANGE = (0.1, 3600.0)
BATCH_RANGE = (1, 1000)  # claim_runs: scrinalia.max_claim_batch()
DEFAULT_BATCH = 32

# What a runner calls, by exact signature (types of the scrinalia schema unqualified);
# membership in scrinalia_runner grants them (sql/90_roles.sql).
RUNNER_GROUP = "scrinalia_runner"
RUNNER_FUNCTIONS = (
    "claim_runs(text, interval, text[], integer)",
    "heartbeat_runs(bigint[], uuid[])",
    "finish_runs(bigint[], uuid[], run_status[], text[], text[])",
    "release_runs(bigint[], uuid[])",
    "next_claimable_at(text[])",
)


class _Done(NamedTuple):
    """A handler's outcome, posted by the handler thread."""

    run_id: int
    outcome: Outcome
    at: float  # time.monotonic() when the handler returned


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
    """One long-lived daemon thread that calls handlers, one run after another in the
    order submitted; it posts each outcome to `done` and rings `wakeup`. The runs not
    started yet can be taken back (take)."""

    def __init__(self, done: queue.SimpleQueue, wakeup: _Wakeup):
        self._done = done
        self._wakeup = wakeup
        self._lock = threading.Lock()
        self._pending: collections.deque = collections.deque()  # (handler or None, run, first of its batch)
        self._go: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self.current: tuple[int, float] | None = None  # (run_id, started, monotonic)

    def submit(self, items: list[tuple[Handler | None, dict]]) -> None:
        """Queues the runs of a batch. The first starts at once: it counts as running
        from here on, and only the runs behind it can be taken back by a stop."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="scrinalia-handler", daemon=True)
            self._thread.start()
        with self._lock:
            self._pending.extend((handler, run, i == 0) for i, (handler, run) in enumerate(items))
        self._go.put(None)

    def take(self, run_ids: set[int] | None = None, *, first_too: bool = False) -> list[dict]:
        """Takes back the runs not started (those of run_ids, or all; a batch's first
        run only when first_too); returns them."""
        with self._lock:
            keep, taken = collections.deque(), []
            for handler, run, first in self._pending:
                if (run_ids is None or run["run_id"] in run_ids) and (first_too or not first):
                    taken.append(run)
                else:
                    keep.append((handler, run, first))
            self._pending = keep
        return taken

    @property
    def waiting(self) -> int:
        """How many submitted runs wait behind a running one."""
        return sum(1 for _, _, first in self._pending if not first)

    @property
    def busy(self) -> bool:
        return self.current is not None or bool(self._pending)

    def _loop(self) -> None:
        while True:
            self._go.get()
            while True:
                with self._lock:
                    if not self._pending:
                        break
                    handler, run, _ = self._pending.popleft()
                    self.current = (run["run_id"], time.monotonic())
                try:
                    outcome = (
                        call(handler, run)
                        if handler is not None
                        else Outcome("FAILED", f"no handler for worker {run['worker_name']}", "no-handler")
                    )
                except BaseException:  # call() does not raise; this thread must never die silently
                    outcome = Outcome("FAILED", "the runner could not describe the failure", "runner-internal")
                with self._lock:
                    self.current = None
                self._done.put(_Done(run["run_id"], outcome, time.monotonic()))
                self._wakeup.ring()


class Runner:
    def __init__(
        self,
        dsn: str,
        handlers: dict[str, Handler] | None = None,
        runner_id: str | None = None,
        lease: timedelta = timedelta(seconds=30),
        workers: list[str] | None = None,
        log: EventLog | None = None,
        grace: float = 30.0,
        batch: int = DEFAULT_BATCH,
    ):
        self.dsn = dsn
        self.max_batch = batch
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
                self.log(
                    "exiting at once",
                    level="warning",
                    signal=signal.Signals(signum).name,
                    reason="second signal; a running run is left to its lease",
                )
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

    # -- one batch -----------------------------------------------------------------

    def run_once(self) -> dict | None:
        """Claims and runs one run; returns the claimed row (with 'outcome') or None."""
        runs = self.run_batch(1)
        return runs[0] if runs else None

    def run_batch(self, limit: int) -> list[dict]:
        """Claims up to `limit` runs and sees each to its end; returns the claimed rows,
        each with 'outcome': its reported status, or LEASE_LOST, RELEASED (given back
        to the queue unstarted) or UNREPORTED. An empty list: nothing to claim."""
        conn = self._connect()
        self.claim_attempts += 1
        self._last_claim = time.monotonic()
        runs = (
            conn.cursor(row_factory=dict_row)
            .execute(
                "SELECT * FROM scrinalia.claim_runs(%s, %s, %s, %s)", (self.runner_id, self.lease, self.workers, limit)
            )
            .fetchall()
        )
        if not runs:
            return []
        self._backoff.reset()
        with self.log.batch():  # a batch's lines, one write
            for run in runs:
                self.log(
                    "claimed",
                    run_id=run["run_id"],
                    worker=run["worker_name"],
                    trigger=run["trigger"],
                    attempt=run["attempt"],
                )
        self._handler_thread.submit([(handler_for(self.handlers, run["worker_name"]), run) for run in runs])
        self._see_through({run["run_id"]: run for run in runs})
        return runs

    def _see_through(self, held: dict[int, dict]) -> None:
        """Supervises a submitted batch until every run has an outcome: reports them
        (batched), heartbeats the runs held, gives back the runs a slow handler or a
        stop holds up, and applies the grace."""
        interval = max(self.lease.total_seconds() / 3, 0.2)
        next_beat = time.monotonic() + interval
        grace_ends = None
        lost: set[int] = set()
        unreported: list[tuple[dict, _Done]] = []
        while held or unreported:
            while True:
                try:
                    done = self._done.get_nowait()
                except queue.Empty:
                    break
                run = held.pop(done.run_id, None)
                if run is not None and done.run_id not in lost:
                    unreported.append((run, done))
                elif run is not None:
                    run["outcome"] = "LEASE_LOST"
            now = time.monotonic()
            current = self._handler_thread.current
            if self.stopping and grace_ends is None:
                self._release(held, "shutting down")
                grace_ends = now + self.grace
                for run_id in held:  # the running one (or the first of the batch, starting)
                    if run_id not in lost:
                        self.log("stopping", run_id=run_id, grace=self.grace, reason="waiting for the running handler")
            elif current is not None and now - current[1] >= RELEASE_AFTER and self._handler_thread.waiting:
                self._release(held, f"run #{current[0]} has been running for {RELEASE_AFTER} s")
            if unreported and (
                not held or self.stopping or not self._handler_thread.busy or now - unreported[0][1].at >= REPORT_AFTER
            ):
                self._report(unreported)
                unreported = []
                continue
            if not held:
                continue
            if self.stopping and set(held) <= lost:
                for run in held.values():  # nothing left to report: no reason to wait for the handler
                    run["outcome"] = "LEASE_LOST"
                return
            if grace_ends is not None and now >= grace_ends:
                for run_id, run in held.items():
                    self.log("grace over", level="warning", run_id=run_id, grace=self.grace)
                    if run_id in lost:
                        run["outcome"] = "LEASE_LOST"
                    else:
                        unreported.append(
                            (run, _Done(run_id, Outcome("INTERRUPTED", SHUTDOWN_ERROR, SHUTDOWN_FINGERPRINT), now))
                        )
                held = {}
                continue
            if now >= next_beat and set(held) - lost:
                lost |= self._heartbeat([run for run_id, run in held.items() if run_id not in lost])
                for run in self._handler_thread.take(lost & set(held), first_too=True):  # lost before it started
                    held.pop(run["run_id"])["outcome"] = "LEASE_LOST"
                next_beat = time.monotonic() + interval
                continue
            deadlines = [next_beat] if set(held) - lost else []
            if grace_ends is not None:
                deadlines.append(grace_ends)
            if unreported:
                deadlines.append(unreported[0][1].at + REPORT_AFTER)
            if self._handler_thread.waiting and not self.stopping:
                # (no current: the thread is taking the next run up; it started by now)
                deadlines.append((current[1] if current is not None else now) + RELEASE_AFTER)
            self.wakeup.wait(max(min(deadlines) - now, 0) if deadlines else None)

    def _release(self, held: dict[int, dict], reason: str) -> None:
        """Gives the held runs whose handler has not started back to the queue."""
        runs = self._handler_thread.take(set(held))
        for run in runs:
            held.pop(run["run_id"])["outcome"] = "RELEASED"
        if runs:
            try:
                self._release_taken(runs, reason)
            except (psycopg.Error, DatabaseUnavailable) as e:
                # they come back when their leases end (the reaper; the retry policy applies)
                self.log("release error", level="warning", runs=len(runs), reason=one_line(e))
                self.close()

    def _release_taken(self, runs: list[dict], reason: str) -> None:
        released = {
            r[0]
            for r in self._connect()
            .execute(
                "SELECT run_id FROM scrinalia.release_runs(%s, %s)",
                ([r["run_id"] for r in runs], [r["lease_token"] for r in runs]),
            )
            .fetchall()
        }
        self.log("released", runs=",".join(str(r["run_id"]) for r in runs if r["run_id"] in released), reason=reason)

    def _heartbeat(self, runs: list[dict]) -> set[int]:
        """Extends the leases; returns the run ids whose lease is lost. Never raises: a
        failed heartbeat is logged and tried again (once at once on a new connection,
        then next beat)."""
        args = ([r["run_id"] for r in runs], [r["lease_token"] for r in runs])

        def failed(e: BaseException) -> None:
            for run in runs:
                self.log("heartbeat error", level="warning", run_id=run["run_id"], reason=one_line(e))

        for _ in range(2):
            try:
                rows = (
                    self._connect()
                    .execute("SELECT run_id, lost_reason FROM scrinalia.heartbeat_runs(%s, %s)", args)
                    .fetchall()
                )
            except psycopg.Error as e:
                failed(e)
                if not is_transient(e):
                    return set()
                self.close()
                continue
            except Exception as e:  # DatabaseUnavailable (no server), or anything else
                failed(e)
                return set()
            lost = set()
            for run_id, reason in rows:
                if reason is not None:
                    self.log("lease lost", level="warning", run_id=run_id, reason=f"lease lost: {reason}")
                    lost.add(run_id)
            return lost
        return set()

    def _report(self, items: list[tuple[dict, _Done]]) -> None:
        """finish_runs() for the outcomes; sets each run's 'outcome'. Transient errors
        are retried until the leases would be gone; after that the reaper ends the runs
        and the retry policy applies."""
        # shutting down, the container's stop timeout is near: a few seconds, not a lease
        give_up = time.monotonic() + min(self.lease.total_seconds(), 5.0 if self.stopping else math.inf)
        backoff = Backoff(base=0.1, cap=2.0)
        retried = False
        while True:
            try:
                rows = self._finish(items)
                break
            except psycopg.Error as e:
                if not is_transient(e):
                    raise
                reason = one_line(e)
            except DatabaseUnavailable as e:
                reason = one_line(e)
            self.close()
            if time.monotonic() >= give_up:
                for run, done in items:
                    self.log(
                        "report abandoned",
                        level="error",
                        run_id=run["run_id"],
                        status=done.outcome.status,
                        reason=f"database unavailable for the lease's length: {reason}",
                    )
                    run["outcome"] = "UNREPORTED"
                return
            self.log(
                "database unavailable",
                level="warning",
                runs=",".join(str(r["run_id"]) for r, _ in items),
                reason=reason,
            )
            time.sleep(backoff.next_delay())
            retried = True
        with self.log.batch():  # the batch's lines, one write
            for run, done in items:
                status, lost = rows[run["run_id"]]
                o = done.outcome
                if lost is not None and not (retried and lost == f"the run is {o.status}"):
                    # (after a retry, "the run is <our status>": the first call committed, only its answer was lost)
                    self.log("lease lost", level="warning", run_id=run["run_id"], reason=f"lease lost: {lost}")
                    run["outcome"] = "LEASE_LOST"
                    continue
                fields = {}
                if o.error:
                    fields = {"error": o.error.splitlines()[0][:500], "fingerprint": o.fingerprint}
                elif o.summary:
                    fields = {"summary": o.summary}
                self.log(
                    "interrupted" if o.status == "INTERRUPTED" else "finished",
                    run_id=run["run_id"],
                    worker=run["worker_name"],
                    status=o.status,
                    **fields,
                )
                run["outcome"] = o.status

    def _finish(self, items: list[tuple[dict, _Done]]) -> dict[int, tuple[str | None, str | None]]:
        """One finish_runs() call; {run_id: (status, lost_reason)}."""
        conn = self._connect()
        ids = [run["run_id"] for run, _ in items]
        tokens = [run["lease_token"] for run, _ in items]
        statuses = [d.outcome.status for _, d in items]
        errors = [d.outcome.error for _, d in items]
        fingerprints = [d.outcome.fingerprint for _, d in items]
        sql = "SELECT run_id, status::text, lost_reason FROM scrinalia.finish_runs(%s, %s, %s::scrinalia.run_status[], %s, %s)"
        try:
            rows = conn.execute(sql, (ids, tokens, statuses, errors, fingerprints)).fetchall()
        except (psycopg.errors.DataException, UnicodeEncodeError):
            # a text does not fit the database's encoding (a LATIN1 database and a
            # Chinese file name; psycopg refuses it, or the server): store them
            # ASCII-escaped rather than not at all
            errors = [e.encode("ascii", "backslashreplace").decode("ascii") if e else None for e in errors]
            rows = conn.execute(sql, (ids, tokens, statuses, errors, fingerprints)).fetchall()
        return {run_id: (status, lost) for run_id, status, lost in rows}

    # -- the loop ------------------------------------------------------------------

    def _idle(self) -> None:
        conn = self._connect()
        wait = (
            conn.cursor(row_factory=dict_row)
            .execute("SELECT extract(epoch FROM scrinalia.next_claimable_at(%s) - now()) AS wait", (self.workers,))
            .fetchone()["wait"]
        )
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

    def _give_back(self) -> None:
        """After an error in the middle of a batch: the runs not started must not run
        unsupervised. They go back to the queue if the database answers; else their
        leases end and the reaper applies the retry policy."""
        held = {run["run_id"]: run for run in self._handler_thread.take(first_too=True)}
        if held:
            self.close()
            try:
                self._release_taken(list(held.values()), "the batch was interrupted by an error")
            except Exception as e:
                self.log("release error", level="warning", runs=len(held), reason=one_line(e))
                self.close()

    def run_forever(self) -> None:
        """Claims until stopped. Transient database errors: log, back off, reconnect.
        ConfigError (a lost grant included) propagates: one line, exit 2."""
        self.log(
            "runner started",
            runner_id=self.runner_id,
            workers=",".join(self.workers or [ANY_WORKER]),
            lease=self.lease.total_seconds(),
            grace=self.grace,
            batch=self.max_batch,
        )
        batch = 1
        try:
            while not self.stopping:
                try:
                    started = time.monotonic()
                    runs = self.run_batch(batch)
                    if not runs:
                        batch = 1
                        self._idle()
                    elif time.monotonic() - started < RELEASE_AFTER and all(
                        r.get("outcome") != "RELEASED" for r in runs
                    ):
                        batch = min(batch * 2, self.max_batch)  # quick handlers: claim more at once
                    else:
                        batch = 1
                    self._backoff.reset()
                except ConfigError:
                    raise  # misconfiguration: one line and exit 2, never retried
                except psycopg.errors.InsufficientPrivilege as e:
                    raise MissingPrivilege(f"login lost a privilege: {e.diag.message_primary}") from None
                except (psycopg.Error, DatabaseUnavailable) as e:
                    self._give_back()
                    transient = is_transient(e)
                    self.log(
                        "database unavailable" if transient else "database error",
                        level="warning" if transient else "error",
                        reason=one_line(e),
                    )
                    self.close()
                    self._pause(self._backoff.next_delay())
                except Exception as e:  # a bug of ours: say so, back off, never crash-loop
                    self._give_back()
                    self.log("runner error", level="error", reason=f"{type(e).__name__}: {one_line(e)}")
                    self.close()
                    self._pause(self._backoff.next_delay())
        finally:
            self.close()
        self.log("stopped", runner_id=self.runner_id, claim_attempts=self.claim_attempts)


# -- start-up ----------------------------------------------------------------------


def _runner_id(value: str) -> str:
    if not RUNNER_ID.fullmatch(value):
        raise argparse.ArgumentTypeError(
            f"invalid runner id {printable(value[:100])!r}: 1 to 200 ASCII letters, digits or _ . : @ / -"
        )
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argtypes.DaemonParser(
        prog="scrinalia-runner", description="the reference runner (handler contract: docs/handlers.md)"
    )
    p.add_argument("--dsn", help="database (else DATABASE_URL or the PG* variables)")
    p.add_argument(
        "--handlers",
        metavar="MODULE",
        required=False,
        help="the module whose HANDLERS dict maps worker names to handlers (required)",
    )
    p.add_argument("--runner-id", type=_runner_id, help="1 to 200 of A-Z a-z 0-9 _ . : @ / - (default host:pid)")
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
    p.add_argument("--json", action="store_true", help="log JSON lines")
    args = p.parse_args(argv)
    if not args.handlers:
        p.error("--handlers MODULE is required (the demo's is scrinalia_workers.demo.handlers)")
    return args


def _exit_now(signum: int, frame=None) -> None:
    """A signal during start-up: nothing claimed, nothing to report, no traceback."""
    os._exit(128 + signum)


def _start(args: argparse.Namespace, log: EventLog) -> Runner:
    """The runner, once its handlers load and its database and login check out."""
    handlers = load_handlers(args.handlers)
    dsn = preflight(
        args.dsn, "scrinalia-runner check", functions=RUNNER_FUNCTIONS, job="claim runs", groups=(RUNNER_GROUP,)
    )
    return Runner(
        dsn,
        handlers,
        runner_id=args.runner_id,
        lease=timedelta(seconds=args.lease),
        grace=args.grace,
        log=log,
        batch=args.batch,
    )


def _lingering_threads(runner: Runner) -> bool:
    """A handler still running, or threads a handler started and left behind."""
    return runner.handler_busy or any(
        t.is_alive() and not t.daemon and t is not threading.main_thread() for t in threading.enumerate()
    )


def _log_stray_errors(log: EventLog) -> None:
    """Errors in threads a handler started, or in its objects' __del__, become one log
    line each rather than a traceback on stderr (which would break --json's lines)."""
    from scrinalia_workers.runner.failure import describe_failure

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
