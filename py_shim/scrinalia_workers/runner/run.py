"""A claimed run, typed: built once from the row claim_runs() returned, then moved
through its states (runner/run_states.py) by the batch alone.

The row itself is kept whole, read-only, for the handler (which gets a copy of it, the
contract of docs/handlers.md); the runner reads only the typed fields. Everything the
runner learns about the run afterwards (its state, the handler's outcome, why it must
stop) lives here, never in the row.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from scrinalia_workers.runner.handlers import Outcome
from scrinalia_workers.runner.run_states import ENDS, TRANSITIONS, IllegalMove, RunState


class Reported(NamedTuple):
    """What came of reporting a run: REPORTED, LEASE_LOST or UNREPORTED, and why."""

    state: RunState
    reason: str | None


class StopSignal:
    """Set once when the run must stop: cancelled, past its maximum run time, or its
    lease lost (another party owns the run now). The handler reads it through
    scrinalia_workers.runner.context; the runner sets it."""

    __slots__ = ("_event", "reason")

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason: str | None = None

    def set(self, reason: str) -> None:
        if not self._event.is_set():
            self.reason = reason
            self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None) -> bool:
        return self._event.wait(timeout)


@dataclass(eq=False, slots=True)
class ClaimedRun:
    """One run this runner holds, from its claim to one of its ends."""

    run_id: int
    worker_name: str
    trigger: str
    attempt: int
    lease_token: Any  # a uuid.UUID: passed back to the SQL API as it came
    row: Mapping[str, Any]  # the claimed row as claim_runs() returned it
    state: RunState = RunState.CLAIMED
    outcome: Outcome | None = None  # the handler's (or the grace's), from DONE on
    done_at: float | None = None  # the clock's monotonic() when the outcome came
    lost_reason: str | None = None  # why it ends unreported: its lease lost, or the database away
    stop: StopSignal = field(default_factory=StopSignal)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> ClaimedRun:
        return cls(
            run_id=row["run_id"],
            worker_name=row["worker_name"],
            trigger=row["trigger"],
            attempt=row["attempt"],
            lease_token=row["lease_token"],
            row=row,
        )

    def for_handler(self) -> dict[str, Any]:
        """What the handler is called with: a copy of the claimed row."""
        return dict(self.row)

    @property
    def end(self) -> str | None:
        """How the run left this runner: the status reported, or RELEASED, LEASE_LOST,
        UNREPORTED; None while it is held."""
        if self.state is RunState.REPORTED:
            assert self.outcome is not None
            return self.outcome.status
        return ENDS.get(self.state)

    def move(
        self, to: RunState, *, outcome: Outcome | None = None, at: float | None = None, reason: str | None = None
    ) -> None:
        """Moves to `to`: DONE carries its outcome; LOST, LEASE_LOST and UNREPORTED may carry why."""
        if to not in TRANSITIONS[self.state]:
            raise IllegalMove(f"run #{self.run_id}: {self.state.name} -> {to.name}")
        if to is RunState.DONE:
            if outcome is None or at is None:
                raise IllegalMove(f"run #{self.run_id}: DONE without an outcome")
            self.outcome, self.done_at = outcome, at
        if reason is not None:
            self.lost_reason = reason
        self.state = to
        if to in (RunState.LOST, RunState.LEASE_LOST):
            # nothing the handler still does will count: tell it
            self.stop.set(f"lease lost: {self.lost_reason}" if self.lost_reason else "lease lost")

    def __repr__(self) -> str:
        return f"ClaimedRun(#{self.run_id}, {self.state.name})"
