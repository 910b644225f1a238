"""The reference runner: claim runs, keep their leases alive, run the handlers, report.

    scrinalia-runner --handlers mypkg.handlers [--lease 30] [--grace 30] [--batch 500]
                     [--concurrency 4] [--json]

The handler contract is docs/handlers.md. The runner never retries: a failure is
reported FAILED and the scheduler decides. A heartbeat that answers lost (SW020's
reasons) means another party owns the run now: the runner drops it without reporting.

Batches: one claim_runs() call hands the runner up to --batch runs (of different
workers: a worker has one slot), which the handler thread runs one after another;
finish_runs() reports several outcomes in one call. A backlog of quick runs costs two
round trips per batch, not per run. The batch starts at one run after an idle spell
and doubles while handlers are quick. Claimed runs wait for their turn at most
release_after: when the handlers run longer, another handler thread takes up the runs
they hold up (up to --concurrency threads, each running one handler at a time); with
every thread held up, those runs go back to the queue (release_runs) for another
runner. After a slow batch the next claim is of one run again. Each run's
life in the runner, from its claim to its end, is runner/run_states.py; the loop that
sees a batch through, runner/batch.py.

Threads: the main thread claims, heartbeats (every lease/3, one call for all the runs
it holds, on the runner's one connection), reports, and handles signals; one
long-lived handler thread calls the handlers, and more start only when handlers
overrun release_after (runner/handler_thread.py). SIGTERM/SIGINT: stop claiming, give
back the runs not started, give the running handlers --grace seconds, then report them
INTERRUPTED "runner shut down" (the retry policy applies as to a reaped lease) and exit
0. A second signal exits at once with 128 + the signal number; the run is then left to
its lease. The command line and the signals: runner/command.py.
"""

from __future__ import annotations

import signal
from datetime import timedelta

import psycopg

from scrinalia_workers.clock import SYSTEM, Clock
from scrinalia_workers.errors import ConfigError, DatabaseUnavailable, MissingPrivilege, SchemaMismatch
from scrinalia_workers.exits import exit_at_once
from scrinalia_workers.gateway.backoff import Backoff, is_transient
from scrinalia_workers.gateway.checks import schema_moved
from scrinalia_workers.logs import EventLog, one_line
from scrinalia_workers.runner.batch import Batch, HandlersStuck, Supervision
from scrinalia_workers.runner.handler_thread import HandlerThread
from scrinalia_workers.runner.handlers import ANY_WORKER, Handler, handler_for
from scrinalia_workers.runner.ledger import Ledger
from scrinalia_workers.runner.run import ClaimedRun
from scrinalia_workers.runner.run_lines import log_claimed, log_released
from scrinalia_workers.runner.runner_id import default_runner_id
from scrinalia_workers.runner.settings import DEFAULTS, RunnerSettings
from scrinalia_workers.runner.wakeup import Waiter, Wakeup

# Any login can NOTIFY scrinalia_runs: an idle runner woken by a NOTIFY claims at most
# once per min_wake_interval (RunnerSettings), however many arrive; a backlog is
# drained without it (a claimed run is followed by the next claim at once).
# A batch grows to this only while whole batches stay quick (next_batch_size): a backlog
# of quick runs pays a claim and a report per this many runs, and a mix with slow
# handlers keeps its batches small anyway.
DEFAULT_BATCH = 500
# Handler threads at most: the first runs every handler while they are quick; the others
# start when handlers overrun release_after (RunnerSettings), so that the runs behind a slow one are
# run here rather than given back.
DEFAULT_CONCURRENCY = 4


def idle_delay(seconds_to_next: float | None, settings: RunnerSettings = DEFAULTS) -> float:
    """How long an idle runner stands by: until the next run is claimable, within
    min_idle .. max_idle (None: nothing queued)."""
    if seconds_to_next is None:
        return settings.max_idle
    return min(max(seconds_to_next, settings.min_idle), settings.max_idle)


def next_batch_size(
    size: int, runs: list[ClaimedRun], took: float, max_batch: int, settings: RunnerSettings = DEFAULTS
) -> int:
    """The next claim's limit: doubled while a whole batch was quick and none of it was
    given back; else one run (after an idle spell, a slow handler, a release)."""
    if runs and took < settings.release_after and all(r.end != "RELEASED" for r in runs):
        return min(size * 2, max_batch)  # quick handlers: claim more at once
    return 1


def _drain_notifies(conn: psycopg.Connection) -> int:
    """Consumes the NOTIFYs that arrived so far; how many."""
    return len(list(conn.notifies(timeout=0)))


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
        concurrency: int = DEFAULT_CONCURRENCY,
        clock: Clock = SYSTEM,
        wakeup: Waiter | None = None,
        settings: RunnerSettings = DEFAULTS,
    ):
        self.dsn = dsn
        self.settings = settings
        self.max_batch = batch
        self.handlers = dict(handlers or {})
        self.runner_id = runner_id or default_runner_id()
        self.lease = lease
        self.grace = grace
        self._workers = workers
        self.log = log or EventLog()
        self.clock = clock
        self.wakeup: Waiter = wakeup or Wakeup()
        self.ledger = Ledger(dsn, self.runner_id, lease, self.log, clock, settings)
        self.concurrency = concurrency
        self._handler_thread = HandlerThread(self.wakeup, clock, max_threads=concurrency)
        self._supervision = Supervision(
            handlers=self._handler_thread,
            ledger=self.ledger,
            wakeup=self.wakeup,
            clock=clock,
            log=self.log,
            lease=lease.total_seconds(),
            grace=grace,
            stopping=lambda: self.stopping,
            settings=settings,
        )
        self._flight: Batch | None = None  # the runs held, across claims while handlers run long
        self._found_empty = False  # the last claim found nothing (while runs were held)
        self._next_look = 0.0  # then, when to look at the queue again without a NOTIFY
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

    def _holding(self) -> bool:
        return self._flight is not None and bool(self._flight.held or self._flight.unreported)

    @property
    def handler_busy(self) -> bool:
        return self._handler_thread.busy

    # -- signals -----------------------------------------------------------------

    def on_signal(self, signum: int, frame=None) -> None:
        """First SIGTERM/SIGINT: stop after the grace. Second: exit at once."""
        self._signals += 1
        if self._signals > 1:
            exit_at_once(
                128 + signum,
                self.log,
                "exiting at once",
                signal=signal.Signals(signum).name,
                reason="second signal; a running run is left to its lease",
            )
        self.stopping = True
        self.wakeup.ring()  # in case the C-level ring was drained before this ran

    def request_stop(self) -> None:
        self.stopping = True
        self.wakeup.ring()

    def close(self) -> None:
        self.ledger.close()

    # -- one batch -----------------------------------------------------------------

    def run_once(self) -> ClaimedRun | None:
        """Claims and runs one run; returns it (its end said) or None."""
        runs = self.run_batch(1)
        return runs[0] if runs else None

    def run_batch(self, limit: int) -> list[ClaimedRun]:
        """Claims up to `limit` runs and sees each to its end; returns them, each with
        its end: its reported status, or LEASE_LOST, RELEASED (given back to the queue
        unstarted) or UNREPORTED. An empty list: nothing to claim.

        In run_forever, while handlers run long, the runs are held across claims
        instead: see_through returns whenever another claim may be made (a handler
        thread is free), the runs claimed then join the held ones, and the held runs
        are heartbeated and reported meanwhile. A stuck handler holds up only its thread."""
        flight = self._flight if self._flight is not None and (self._flight.held or self._flight.unreported) else None
        free = limit if flight is None else min(limit, self.concurrency - len(flight.held))
        runs: list[ClaimedRun] = []
        if flight is None:
            self.ledger.connect()
            self.claim_attempts += 1
            self._last_claim = self.clock.monotonic()
            runs = self.ledger.claim(self.workers, free)
        elif free > 0:
            runs = self._claim_while_holding(free)
        if runs:
            self._backoff.reset()
            self._found_empty = False
            log_claimed(self.log, runs)
            handlers = [handler_for(self.handlers, run.worker_name) for run in runs]
            if flight is None:
                flight = Batch(runs, self._supervision)
                flight.hand(handlers)
            else:
                flight.add(runs, handlers)
        if flight is not None:
            self._flight = flight
            flight.see_through()
        if runs:
            self.ledger.unlisten()  # busy: until the next stand-by, the queue is looked at anyway
        return runs

    def _claim_while_holding(self, limit: int) -> list[ClaimedRun]:
        """A claim while held runs go on. Nothing claimable: stand by on the connection
        (a NOTIFY, or the next run's not_before) while the held runs are seen to. A
        database error is logged and waited out: it must not abandon the held runs,
        whose heartbeats and reports have their own retries."""
        self.claim_attempts += 1
        self._last_claim = self.clock.monotonic()
        try:
            runs = self.ledger.claim(self.workers, limit)
            if runs:
                return runs
            conn = self.ledger.listen()
            wait = idle_delay(self.ledger.seconds_to_next_claimable(self.workers), self.settings)
            _drain_notifies(conn)
        except (psycopg.Error, DatabaseUnavailable) as e:
            if isinstance(e, psycopg.Error) and not is_transient(e):
                raise
            self.log("database unavailable", level="warning", reason=one_line(e))
            self.ledger.close()
            wait = self._backoff.next_delay()
        self._found_empty = True
        self._next_look = self.clock.monotonic() + wait
        return []

    def _may_claim(self, flight: Batch) -> bool:
        """While runs are held: whether to claim more now (a thread is free, the held
        runs all run long, and the queue may have something)."""
        if self.stopping or len(flight.held) >= self.concurrency:
            return False
        now = self.clock.monotonic()
        if not flight.all_long(now):
            return False
        if not self._found_empty:
            return True
        conn = self.ledger.conn
        return now >= self._next_look or (conn is not None and self.ledger.listening and _drain_notifies(conn) > 0)

    def _listening_socket(self) -> int | None:
        conn = self.ledger.conn
        if not self._found_empty or conn is None or conn.closed or not self.ledger.listening:
            return None
        return conn.fileno()

    # -- the loop ------------------------------------------------------------------

    def _idle(self) -> None:
        """Stands by until a run may be claimable: a NOTIFY, the next run's not_before,
        or max_idle; returns early on a stop."""
        conn = self.ledger.listen()
        delay = idle_delay(self.ledger.seconds_to_next_claimable(self.workers), self.settings)
        # notifications that came in during a long run wait in psycopg's backlog: one
        # claim attempt answers them all, not one attempt each
        if _drain_notifies(conn):
            return self._coalesce(conn)
        deadline = self.clock.monotonic() + delay
        while not self.stopping and (left := deadline - self.clock.monotonic()) > 0:
            # the connection's socket (a NOTIFY) or the wake-up pipe (a signal)
            if self.wakeup.wait(left, also=conn.fileno()) and _drain_notifies(conn):
                return self._coalesce(conn)

    def _coalesce(self, conn: psycopg.Connection) -> None:
        """After a NOTIFY: wait out min_wake_interval since the last claim, folding
        every NOTIFY that arrives meanwhile into the one claim that follows."""
        self._pause(self._last_claim + self.settings.min_wake_interval - self.clock.monotonic())
        _drain_notifies(conn)

    def _pause(self, seconds: float) -> None:
        """Sleeps, unless a stop request comes first."""
        deadline = self.clock.monotonic() + seconds
        while not self.stopping and (left := deadline - self.clock.monotonic()) > 0:
            self.wakeup.wait(left)

    def _give_back(self) -> None:
        """After an error in the middle of a batch: the runs not started must not run
        unsupervised. They go back to the queue if the database answers; else their
        leases end and the reaper applies the retry policy."""
        dropped, self._flight = self._flight, None  # its running handlers' outcomes are dropped
        if dropped is not None:
            now = self.clock.monotonic()
            for run in dropped.held.values():
                if run.run_id in self._handler_thread.running_ids:
                    # its lease is no longer renewed and the reaper ends it: tell the
                    # handler; one that never returns holds its thread (Batch._check_stuck)
                    run.stop.set("the runner dropped its batch after an error: the lease is not renewed")
                    self._supervision.orphans[run.run_id] = now
        held = self._handler_thread.take(first_too=True)
        if held:
            self.close()
            reason = "the batch was interrupted by an error"
            released = self.ledger.release(held, reason)
            if released:
                log_released(self.log, [run for run in held if run.run_id in released], reason)

    def _schema_moved(self, e: BaseException) -> SchemaMismatch | None:
        """The SchemaMismatch to exit 2 with when `e` came from a database no longer at this
        release's head (a rollback, another release's migrate), else None."""
        try:
            return schema_moved(self.ledger.connect(), e)
        except (psycopg.Error, DatabaseUnavailable):
            return None

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
            concurrency=self.concurrency,
        )
        size = 1
        self._supervision.may_claim = self._may_claim
        self._supervision.also = self._listening_socket
        self._supervision.wake_by = lambda: self._next_look if self._found_empty else None
        try:
            while not self.stopping:
                try:
                    started = self.clock.monotonic()
                    runs = self.run_batch(size)
                    size = next_batch_size(size, runs, self.clock.monotonic() - started, self.max_batch, self.settings)
                    if not runs and not self._holding():
                        self._idle()
                    self._backoff.reset()
                except (ConfigError, HandlersStuck):
                    raise  # misconfiguration (exit 2), or no thread left to run a handler (exit 3)
                except psycopg.errors.InsufficientPrivilege as e:
                    raise MissingPrivilege(f"login lost a privilege: {e.diag.message_primary}") from None
                except (psycopg.Error, DatabaseUnavailable) as e:
                    self._give_back()
                    moved = self._schema_moved(e)
                    if moved is not None:  # rolled back under us, or another release's: exit 2
                        raise moved from None
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
            if self._holding() and self._flight is not None:
                self._flight.see_through()  # a stop came between claims: the held runs get the grace
        finally:
            self.close()
        self.log("stopped", runner_id=self.runner_id, claim_attempts=self.claim_attempts)
