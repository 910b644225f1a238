"""The one long-lived thread that calls the handlers, one run after another."""

from __future__ import annotations

import collections
import queue
import threading
from typing import NamedTuple

from scrinalia_workers.clock import SYSTEM, Clock
from scrinalia_workers.runner.handlers import Handler, Outcome, call
from scrinalia_workers.runner.wakeup import Waiter


class Done(NamedTuple):
    """A handler's outcome, posted by the handler thread."""

    run_id: int
    outcome: Outcome
    at: float  # the clock's monotonic() when the handler returned


class Running(NamedTuple):
    run_id: int
    started: float  # the clock's monotonic() when the handler was called


class _Pending(NamedTuple):
    handler: Handler | None
    run: dict
    first: bool  # the first of its batch: it counts as running from its submission


def outcome_of(handler: Handler | None, run: dict) -> Outcome:
    """What calling the run's handler came to; never raises."""
    try:
        if handler is None:
            return Outcome("FAILED", f"no handler for worker {run['worker_name']}", "no-handler")
        return call(handler, run)
    except BaseException:  # call() does not raise; the handler thread must never die silently
        return Outcome("FAILED", "the runner could not describe the failure", "runner-internal")


class HandlerThread:
    """Calls handlers in the order submitted, on one daemon thread started at the first
    submission; posts each outcome (finished() collects them) and rings `wakeup`. The
    runs not started yet can be taken back (take).

    begin_next() and end() are the two halves of one handler call, so that a test can
    step through them on its own thread, with a fake clock."""

    def __init__(self, wakeup: Waiter, clock: Clock = SYSTEM):
        self._wakeup = wakeup
        self._clock = clock
        self._lock = threading.Lock()
        self._pending: collections.deque[_Pending] = collections.deque()
        self._go: queue.SimpleQueue[None] = queue.SimpleQueue()
        self._done: queue.SimpleQueue[Done] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self.current: Running | None = None

    def submit(self, items: list[tuple[Handler | None, dict]]) -> None:
        """Queues the runs of a batch. The first starts at once: it counts as running
        from here on, and only the runs behind it can be taken back by a stop."""
        if self._thread is None:
            self._thread = self._start_thread()
        with self._lock:
            self._pending.extend(_Pending(handler, run, i == 0) for i, (handler, run) in enumerate(items))
        self._go.put(None)

    def take(self, run_ids: set[int] | None = None, *, first_too: bool = False) -> list[dict]:
        """Takes back the runs not started (those of run_ids, or all; a batch's first
        run only when first_too); returns them."""
        with self._lock:
            keep: collections.deque[_Pending] = collections.deque()
            taken = []
            for p in self._pending:
                if (run_ids is None or p.run["run_id"] in run_ids) and (first_too or not p.first):
                    taken.append(p.run)
                else:
                    keep.append(p)
            self._pending = keep
        return taken

    @property
    def waiting(self) -> int:
        """How many submitted runs wait behind a running one."""
        return sum(1 for p in self._pending if not p.first)

    @property
    def busy(self) -> bool:
        return self.current is not None or bool(self._pending)

    def finished(self) -> list[Done]:
        """The outcomes posted since the last call, oldest first."""
        out = []
        while True:
            try:
                out.append(self._done.get_nowait())
            except queue.Empty:
                return out

    def begin_next(self) -> tuple[Handler | None, dict] | None:
        """Takes the next run up (now current); None when none is pending."""
        with self._lock:
            if not self._pending:
                return None
            handler, run, _ = self._pending.popleft()
            self.current = Running(run["run_id"], self._clock.monotonic())
        return handler, run

    def end(self, run: dict, outcome: Outcome) -> None:
        """The current run's handler returned: posts its outcome."""
        with self._lock:
            self.current = None
        self._done.put(Done(run["run_id"], outcome, self._clock.monotonic()))
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
