"""Seeing one claimed batch through: every run from HANDED to an end (runner/run_states.py).

The main thread loops over these decisions until no run is held and no outcome waits:

- an outcome the handler thread posted moves its run to DONE (or, lease lost, to
  LEASE_LOST);
- a stop (first time seen) gives back the runs not started and starts the grace;
  else, when the running handlers have all run release_after with runs waiting behind
  them, another handler thread takes those runs up (below --concurrency threads), or
  else they are given back, for another runner;
- the DONE outcomes are reported together, once the batch is over, or the handler
  thread is idle, or the runner stops, or the oldest has waited report_after;
- stopping with only lost runs held: nothing to report, so nothing to wait for;
- the grace ran out: the held runs end INTERRUPTED "runner shut down";
- every lease/3 (at least 0.2 s) one heartbeat for the runs whose lease holds;
- otherwise it waits for the wake-up (a handler returned, a signal) until the next
  of those deadlines.

Time comes from the runner's clock; the database calls from a BatchLedger. Both are
injected, so the tests drive this loop without a database and without waiting.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from scrinalia_workers.clock import Clock
from scrinalia_workers.logs import EventLog
from scrinalia_workers.runner.handler_thread import HandlerThread, Running
from scrinalia_workers.runner.handlers import Handler, Outcome
from scrinalia_workers.runner.run import ClaimedRun, Reported
from scrinalia_workers.runner.run_lines import log_lost, log_released, log_reported
from scrinalia_workers.runner.run_states import RunState
from scrinalia_workers.runner.settings import DEFAULTS, RunnerSettings
from scrinalia_workers.runner.wakeup import Waiter

SHUTDOWN_ERROR = "runner shut down"
SHUTDOWN_FINGERPRINT = "runner-shutdown"

HELD = (RunState.HANDED, RunState.LOST)


def heartbeat_interval(lease_seconds: float, settings: RunnerSettings = DEFAULTS) -> float:
    """A third of the lease: two heartbeats may fail before the lease ends."""
    return max(lease_seconds / 3, settings.min_heartbeat_interval)


class BatchLedger(Protocol):
    """The database calls a batch makes (runner/ledger.py; a fake in the tests)."""

    def heartbeat(self, runs: list[ClaimedRun]) -> dict[int, str]:
        """Extends the leases; why each lost one is lost, by run id. Never raises."""
        ...

    def release(self, runs: list[ClaimedRun], reason: str) -> set[int]:
        """Gives the runs back to the queue; the ids given back. Never raises."""
        ...

    def report(self, runs: list[ClaimedRun], *, stopping: bool) -> dict[int, Reported]:
        """finish_runs() for the runs' outcomes: what came of each (REPORTED, LEASE_LOST
        or UNREPORTED, and why)."""
        ...

    def report_stall(self, run_ids: list[int] | None, threads: int = 0, grace: float = 0.0) -> None:
        """Every handler thread held by one of run_ids, told to stop (None: no longer).
        Never raises."""
        ...


@dataclass
class Supervision:
    """What a batch is seen through with: the runner's parts."""

    handlers: HandlerThread
    ledger: BatchLedger
    wakeup: Waiter
    clock: Clock
    log: EventLog
    lease: float  # seconds
    grace: float  # seconds
    stopping: Callable[[], bool]  # a stop was asked for (a signal, request_stop)
    # The runner may claim more while every held run is long (may_claim answers when);
    # see_through then returns to it. Unset: a batch is seen through to its end.
    may_claim: Callable[[Batch], bool] | None = None
    # A file descriptor to wake on besides the handlers and signals (the connection's
    # socket, LISTENing for runs, while the runner waits to claim more)
    also: Callable[[], int | None] = lambda: None
    # While the runner waits to claim more: when it looks at the queue again unwoken
    wake_by: Callable[[], float | None] = lambda: None
    settings: RunnerSettings = DEFAULTS
    # The runs whose batch the runner dropped after an error while their handlers ran
    # (their leases no longer renewed, their handlers told to stop), by when: a thread
    # such a handler never gives back is as stuck as one a lost run holds.
    orphans: dict[int, float] = field(default_factory=dict)
    # Since when every handler thread has been held by a run told to stop: kept here,
    # across the batches, for a thread held past one batch is still held in the next.
    stuck_since: float | None = None


class HandlersStuck(RuntimeError):
    """Every handler thread holds a run that was told to stop and did not return."""


class Batch:
    """The runs of one claim and the decisions that see each to its end."""

    def __init__(self, runs: list[ClaimedRun], sup: Supervision):
        self.sup = sup
        self.runs = {run.run_id: run for run in runs}
        self.held: dict[int, ClaimedRun] = {}  # with the handler thread: HANDED or LOST
        self.lost: set[int] = set()  # the held ones LOST
        self.unreported: list[ClaimedRun] = []  # DONE, oldest outcome first
        self.grace_ends: float | None = None
        self.next_beat = 0.0
        self.relieved_at = -float("inf")  # when another handler thread was last asked for
        self.told: dict[int, float] = {}  # the LOST runs: when their handler was told to stop

    def _move(
        self,
        run: ClaimedRun,
        to: RunState,
        *,
        outcome: Outcome | None = None,
        at: float | None = None,
        reason: str | None = None,
    ) -> None:
        """Moves a run, keeping held, lost and unreported in step with the states."""
        run.move(to, outcome=outcome, at=at, reason=reason)
        if to in HELD:
            self.held[run.run_id] = run
        else:
            self.held.pop(run.run_id, None)
        if to is RunState.LOST:
            self.lost.add(run.run_id)
        else:
            self.lost.discard(run.run_id)
            self.told.pop(run.run_id, None)
        if to is RunState.DONE:
            self.unreported.append(run)

    def _any_handed(self) -> bool:
        return len(self.held) > len(self.lost)

    # -- the loop -------------------------------------------------------------------

    def hand(self, handlers: list[Handler | None]) -> None:
        """Submits the runs (in claim order, each with its handler) to the handler thread."""
        self.sup.handlers.submit(list(zip(handlers, self.runs.values())))
        for run in self.runs.values():
            self._move(run, RunState.HANDED)
        self.next_beat = self.sup.clock.monotonic() + heartbeat_interval(self.sup.lease, self.sup.settings)

    def add(self, runs: list[ClaimedRun], handlers: list[Handler | None]) -> None:
        """Runs claimed while long handlers hold this batch's runs: handed at once, to
        another handler thread (the running ones are long), heartbeated with the others."""
        for run_id in [run_id for run_id, run in self.runs.items() if run.state.final]:
            del self.runs[run_id]  # (a long run may stay held while thousands pass)
        self.runs.update((run.run_id, run) for run in runs)
        self.sup.handlers.submit(list(zip(handlers, runs)))
        for run in runs:
            self._move(run, RunState.HANDED)
        self.sup.handlers.relieve()

    def all_long(self, now: float) -> bool:
        """Every held run is running and has run release_after (or was told to stop):
        nothing waits for a thread, and another claim would not be held up here."""
        current = self.sup.handlers.current
        if not self.held or self.sup.handlers.waiting or current is None:
            return False
        return now >= self._held_since(current, now) + self.sup.settings.release_after

    def see_through(self) -> None:
        """Supervises the handed runs until each has reached an end (or, the grace
        over or every lease lost, was left to its handler)."""
        try:
            self._see_through()
        finally:
            self.sup.handlers.quiet = False
        self._stall_over()

    def _see_through(self) -> None:
        sup = self.sup
        while self.held or self.unreported:
            self._collect()
            now = sup.clock.monotonic()
            current = sup.handlers.current
            if sup.stopping() and self.grace_ends is None:
                self._start_grace(now)
            elif self._holding_up(current, now):
                assert current is not None
                if sup.handlers.relieve():
                    self.relieved_at = now
                else:
                    self._release(f"run #{current.run_id} has been running for {self.sup.settings.release_after} s")
            if self._report_due(now):
                self._report()
                continue
            if not self.held:
                continue
            self._check_stuck(now)
            if sup.stopping() and len(self.lost) == len(self.held):
                for run in list(self.held.values()):  # nothing left to report: no reason to wait for the handler
                    self._move(run, RunState.LEASE_LOST)
                return
            if self.grace_ends is not None and now >= self.grace_ends:
                self._end_grace(now)
                continue
            if now >= self.next_beat and self._any_handed():
                self._heartbeat()
                continue
            if sup.may_claim is not None and not self.unreported and sup.may_claim(self):
                return  # the runner claims more; this batch's runs stay held
            sup.handlers.quiet = bool(self.unreported)  # its deadline wakes us: no ring per outcome
            if not self.unreported and sup.handlers.posted:
                continue  # posted while we were quiet, unrung
            sup.wakeup.wait(self._time_to_next(current, now), also=sup.also())

    # -- the decisions --------------------------------------------------------------

    def _collect(self) -> None:
        """The outcomes the handler thread posted: DONE, or LEASE_LOST for a lost run."""
        for done in self.sup.handlers.finished():
            run = self.held.get(done.run.run_id)
            if run is None:
                continue  # of an earlier batch, or ended by the grace meanwhile
            if run.state is RunState.LOST:
                self._move(run, RunState.LEASE_LOST)
            else:
                self._move(run, RunState.DONE, outcome=done.outcome, at=done.at)

    def _stuck_runs(self) -> list[int]:
        """The runs told to stop whose handlers still hold a thread."""
        sup = self.sup
        running = sup.handlers.running_ids
        for run_id in [r for r in sup.orphans if r not in running]:
            del sup.orphans[run_id]  # its handler returned at last
        return [run_id for run_id in running if run_id in self.lost or run_id in sup.orphans]

    def _stall_over(self) -> None:
        """A handler of a runner said stuck returned: the stall is over, said once. (Not
        while stopping: the runs left to their handlers are no longer counted then,
        though none returned.)"""
        sup = self.sup
        if sup.stopping():
            return
        if sup.stuck_since is not None and len(self._stuck_runs()) < sup.handlers.max_threads:
            sup.stuck_since = None
            sup.ledger.report_stall(None)

    def _check_stuck(self, now: float) -> None:
        """Every handler thread holds a run told to stop (its lease lost: cancelled, past
        its maximum run time, reaped): say so once, naming the runs; when they have not
        returned --grace seconds later, raise HandlersStuck (the runner exits, and its
        supervisor starts a fresh one: nothing else can free those threads)."""
        handlers, sup = self.sup.handlers, self.sup
        stuck = self._stuck_runs()
        if len(stuck) < handlers.max_threads:
            self._stall_over()
            return
        if sup.stuck_since is None:
            sup.stuck_since = max(self.told.get(run_id, sup.orphans.get(run_id, now)) for run_id in stuck)
            self.sup.log(
                "handlers stuck",
                level="error",
                runs=",".join(str(run_id) for run_id in sorted(stuck)),
                threads=handlers.max_threads,
                reason=f"every handler thread runs a run told to stop; exiting after {self.sup.grace} s unless one returns",
            )
            # and in the database, for what an operator's stack reads (RUNNER_STUCK)
            sup.ledger.report_stall(sorted(stuck), handlers.max_threads, max(0.0, sup.stuck_since + sup.grace - now))
        if now >= sup.stuck_since + sup.grace:
            raise HandlersStuck(
                f"handlers stuck: runs {','.join(str(run_id) for run_id in sorted(stuck))} were told to stop "
                f"and did not return within {self.sup.grace} s; every handler thread is held"
            )

    def _start_grace(self, now: float) -> None:
        """A stop: the runs not started go back; the running one gets the grace."""
        self._release("shutting down")
        self.grace_ends = now + self.sup.grace
        for run_id, run in self.held.items():  # the running one (or the first of the batch, starting)
            if run.state is RunState.HANDED:
                self.sup.log("stopping", run_id=run_id, grace=self.sup.grace, reason="waiting for the running handler")

    def _held_since(self, current: Running | None, now: float) -> float:
        """Since when the runs waiting have been held up: the last handler start (none
        running: the thread is taking the next run up, now), or the last relief."""
        return max(current.started if current is not None else now, self.relieved_at)

    def _holding_up(self, current: Running | None, now: float) -> bool:
        """The running handlers have run release_after with runs waiting behind them."""
        return (
            current is not None
            and now >= self._held_since(current, now) + self.sup.settings.release_after
            and self.sup.handlers.waiting > 0
        )

    def _release(self, reason: str) -> None:
        """Gives the held runs whose handler has not started back to the queue."""
        runs = self.sup.handlers.take(set(self.held))
        for run in runs:
            self._move(run, RunState.RELEASED)
        if runs:
            released = self.sup.ledger.release(runs, reason)
            if released:
                log_released(self.sup.log, [run for run in runs if run.run_id in released], reason)

    def _report_due(self, now: float) -> bool:
        if not self.unreported:
            return False
        return (
            not self.held
            or self.sup.stopping()
            or not self.sup.handlers.busy
            or now >= self._oldest_outcome() + self.sup.settings.report_after
        )

    def _oldest_outcome(self) -> float:
        at = self.unreported[0].done_at
        assert at is not None
        return at

    def _report(self) -> None:
        """The one path of an outcome: finish_runs(), the run's end, its line."""
        reporting, self.unreported = self.unreported, []
        came = self.sup.ledger.report(reporting, stopping=self.sup.stopping())
        for run in reporting:
            self._move(run, came[run.run_id].state, reason=came[run.run_id].reason)
        log_reported(self.sup.log, reporting)

    def _end_grace(self, now: float) -> None:
        """The grace ran out: the running handler's run ends INTERRUPTED (its handler is
        left running; whatever it returns later is dropped)."""
        interrupted = Outcome("INTERRUPTED", SHUTDOWN_ERROR, SHUTDOWN_FINGERPRINT)
        for run_id, run in list(self.held.items()):
            self.sup.log("grace over", level="warning", run_id=run_id, grace=self.sup.grace)
            if run.state is RunState.LOST:
                self._move(run, RunState.LEASE_LOST)
            else:
                self._move(run, RunState.DONE, outcome=interrupted, at=now)

    def _heartbeat(self) -> None:
        """One heartbeat for the runs whose lease holds; a lost one that has not started
        is taken back at once (LEASE_LOST), a running one waits for its handler."""
        handed = [run for run in self.held.values() if run.state is RunState.HANDED]
        lost = []
        now = self.sup.clock.monotonic()
        for run_id, why in self.sup.ledger.heartbeat(handed).items():
            run = self.held.get(run_id)
            if run is not None and run.state is RunState.HANDED:
                self._move(run, RunState.LOST, reason=why)
                self.told[run_id] = now
                lost.append(run)
        log_lost(self.sup.log, lost)
        for run in self.sup.handlers.take(set(self.lost), first_too=True):  # lost before it started
            self._move(run, RunState.LEASE_LOST)
        self.next_beat = self.sup.clock.monotonic() + heartbeat_interval(self.sup.lease, self.sup.settings)

    def _time_to_next(self, current: Running | None, now: float) -> float | None:
        """Seconds until the next deadline (heartbeat, grace, report, release); None: none."""
        deadlines = [self.next_beat] if self._any_handed() else []
        if self.grace_ends is not None:
            deadlines.append(self.grace_ends)
        if self.sup.stuck_since is not None:
            deadlines.append(self.sup.stuck_since + self.sup.grace)
        if (look := self.sup.wake_by()) is not None:
            deadlines.append(look)
        if self.unreported:
            deadlines.append(self._oldest_outcome() + self.sup.settings.report_after)
        if self.sup.handlers.waiting and not self.sup.stopping():
            deadlines.append(self._held_since(current, now) + self.sup.settings.release_after)
        return max(min(deadlines) - now, 0) if deadlines else None
