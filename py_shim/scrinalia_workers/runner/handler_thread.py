"""The handler threads: one calls the handlers, one run after another; more start only
when handlers overrun (relieve), up to the runner's --concurrency."""

from __future__ import annotations

import collections
import queue
import threading
from typing import NamedTuple

from scrinalia_workers.clock import SYSTEM, Clock
from scrinalia_workers.runner import context
from scrinalia_workers.runner.handlers import Handler, Outcome, call
from scrinalia_workers.runner.run import ClaimedRun
from scrinalia_workers.runner.wakeup import Waiter


class Done(NamedTuple):
    """A handler's outcome, posted by the handler thread."""

    run: ClaimedRun
    outcome: Outcome
    at: float  # the clock's monotonic() when the handler returned


class Running(NamedTuple):
    run_id: int
    started: float  # the clock's monotonic() when the handler was called


class _Pending(NamedTuple):
    handler: Handler | None
    run: ClaimedRun
    first: bool  # the first of its batch: it counts as running from its submission


def outcome_of(handler: Handler | None, run: ClaimedRun) -> Outcome:
    """What calling the run's handler came to; never raises."""
    try:
        if handler is None:
            return Outcome("FAILED", f"no handler for worker {run.worker_name}", "no-handler")
        context.bind(run.stop)
        try:
            return call(handler, run.for_handler())
        finally:
            context.bind(None)
    except BaseException:  # call() does not raise; the handler thread must never die silently
        return Outcome("FAILED", "the runner could not describe the failure", "runner-internal")


class HandlerThread:
    """Calls handlers in the order submitted, on daemon threads: one, started at the first
    submission, and more (up to max_threads) when relieve() is asked because every
    running handler holds up the runs waiting behind it. Posts each outcome (finished()
    collects them) and rings `wakeup`. The runs not started yet can be taken back (take).

    Quick handlers keep to one thread (no contention for the interpreter); a slow
    handler costs the runs behind it a wait of release_after, then another thread
    takes them up instead of the queue getting them back.

    begin_next() and end() are the two halves of one handler call, so that a test can
    step through them on its own thread, with a fake clock."""

    def __init__(self, wakeup: Waiter, clock: Clock = SYSTEM, max_threads: int = 1):
        self._wakeup = wakeup
        self._clock = clock
        self.max_threads = max_threads
        self._lock = threading.Lock()
        self._pending: collections.deque[_Pending] = collections.deque()
        self._go: queue.SimpleQueue[None] = queue.SimpleQueue()
        self._done: queue.SimpleQueue[Done] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._running: dict[int, Running] = {}  # by run id, the handlers being called
        # Set by the main thread while it will wake within report_after anyway (an
        # outcome waits to be reported): an outcome then rings only when no run is left
        # to start, so a batch of quick runs costs a wake-up or two, not one a run.
        self.quiet = False

    @property
    def current(self) -> Running | None:
        """The running handler started last (None: none runs): the runs waiting are held
        up when even it has run long."""
        with self._lock:  # (the handler threads change it meanwhile)
            running = list(self._running.values())
        return max(running, key=lambda r: r.started) if running else None

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def running_ids(self) -> set[int]:
        with self._lock:
            return set(self._running)

    def submit(self, items: list[tuple[Handler | None, ClaimedRun]]) -> None:
        """Queues the runs of a batch. The first starts at once: it counts as running
        from here on, and only the runs behind it can be taken back by a stop."""
        if not self._threads:
            self._threads.append(self._start_thread())
        with self._lock:
            self._pending.extend(_Pending(handler, run, i == 0) for i, (handler, run) in enumerate(items))
            idle = len(self._threads) - len(self._running)
        for _ in range(max(idle, 1)):
            self._go.put(None)

    def relieve(self) -> bool:
        """The runs waiting are held up: wakes an idle thread for them, or starts another
        (below max_threads); False when every thread is busy."""
        with self._lock:
            idle = len(self._threads) - len(self._running)
        if idle > 0:
            self._go.put(None)
            return True
        if len(self._threads) < self.max_threads:
            self._threads.append(self._start_thread())
            self._go.put(None)
            return True
        return False

    def take(self, run_ids: set[int] | None = None, *, first_too: bool = False) -> list[ClaimedRun]:
        """Takes back the runs not started (those of run_ids, or all; a batch's first
        run only when first_too); returns them."""
        with self._lock:
            keep: collections.deque[_Pending] = collections.deque()
            taken = []
            for p in self._pending:
                if (run_ids is None or p.run.run_id in run_ids) and (first_too or not p.first):
                    taken.append(p.run)
                else:
                    keep.append(p)
            self._pending = keep
        return taken

    @property
    def waiting(self) -> int:
        """How many submitted runs wait behind a running one."""
        with self._lock:  # (a handler thread takes the next one meanwhile)
            return sum(1 for p in self._pending if not p.first)

    @property
    def busy(self) -> bool:
        return bool(self._running) or bool(self._pending)

    @property
    def posted(self) -> bool:
        """An outcome waits for finished()."""
        return not self._done.empty()

    def finished(self) -> list[Done]:
        """The outcomes posted since the last call, oldest first."""
        out = []
        while True:
            try:
                out.append(self._done.get_nowait())
            except queue.Empty:
                return out

    def begin_next(self) -> tuple[Handler | None, ClaimedRun] | None:
        """Takes the next run up (now running); None when none is pending."""
        with self._lock:
            if not self._pending:
                return None
            handler, run, _ = self._pending.popleft()
            self._running[run.run_id] = Running(run.run_id, self._clock.monotonic())
        return handler, run

    def end(self, run: ClaimedRun, outcome: Outcome) -> None:
        """A running run's handler returned: posts its outcome."""
        with self._lock:
            self._running.pop(run.run_id, None)
        self._done.put(Done(run, outcome, self._clock.monotonic()))
        if not self.quiet or not self._pending:
            self._wakeup.ring()

    def _start_thread(self) -> threading.Thread:
        thread = threading.Thread(target=self._loop, name="scrinalia-handler", daemon=True)
        thread.start()
        return thread

    def _loop(self) -> None:
        while True:
            self._go.get()
            while (next_up := self.begin_next()) is not None:
                handler, run = next_up
                self.end(run, outcome_of(handler, run))
