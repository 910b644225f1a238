"""The life of one claimed run inside the runner, as states and the moves between them.

The runner holds a run from its claim to one of four ends; the batch loop
(runner/batch.py) moves each run through these states, and nothing else does:

    CLAIMED   claim_runs() returned it; its "claimed" line is logged.
    HANDED    handed to the handler thread: waiting its turn behind another run, or
              running. Its lease is heartbeated (every lease/3, one call per batch).
    LOST      a heartbeat answered that its lease is lost (another party owns the run
              now); its handler still runs, or has not started.
    DONE      its handler returned (or the grace after a stop ran out: INTERRUPTED
              "runner shut down"); its outcome waits at most REPORT_AFTER for the
              others of its batch, then finish_runs() reports them together.
  ends:
    REPORTED     finish_runs() recorded its outcome.                outcome: the status
    RELEASED     given back unstarted (release_runs): a slow handler
                 held it up past RELEASE_AFTER, or the runner stops. outcome: RELEASED
    LEASE_LOST   nothing reported: a heartbeat or finish_runs()
                 answered that the lease is lost.                   outcome: LEASE_LOST
    UNREPORTED   the database stayed away for the lease's length
                 (a few seconds when stopping); the reaper ends it.  outcome: UNREPORTED

The moves (TRANSITIONS):

    CLAIMED -> HANDED        the batch is submitted to the handler thread
    HANDED  -> DONE          its handler returned; or the grace ran out
    HANDED  -> RELEASED      taken back unstarted and given back to the queue
    HANDED  -> LOST          a heartbeat answered lost
    LOST    -> LEASE_LOST    its handler returned, or was taken back unstarted, or the
                             runner stops (no report to wait for), or the grace ran out
    DONE    -> REPORTED      finish_runs() recorded it
    DONE    -> LEASE_LOST    finish_runs() answered lost
    DONE    -> UNREPORTED    the report was abandoned

A database error in the middle of a batch abandons the batch instead: the runs not
started are given back (Runner._give_back) and the others are left to their leases.
"""

from __future__ import annotations

import enum

from scrinalia_workers.runner.handler_thread import Done


class RunState(enum.Enum):
    CLAIMED = "claimed"
    HANDED = "handed"
    LOST = "lost"
    DONE = "done"
    REPORTED = "reported"
    RELEASED = "released"
    LEASE_LOST = "lease lost"
    UNREPORTED = "unreported"

    @property
    def final(self) -> bool:
        return not TRANSITIONS[self]


TRANSITIONS: dict[RunState, frozenset[RunState]] = {
    RunState.CLAIMED: frozenset({RunState.HANDED}),
    RunState.HANDED: frozenset({RunState.DONE, RunState.RELEASED, RunState.LOST}),
    RunState.LOST: frozenset({RunState.LEASE_LOST}),
    RunState.DONE: frozenset({RunState.REPORTED, RunState.LEASE_LOST, RunState.UNREPORTED}),
    RunState.REPORTED: frozenset(),
    RunState.RELEASED: frozenset(),
    RunState.LEASE_LOST: frozenset(),
    RunState.UNREPORTED: frozenset(),
}

# What run_batch() returns in each run's 'outcome' for the ends other than REPORTED
# (a REPORTED run's outcome is the status reported).
OUTCOMES = {
    RunState.RELEASED: "RELEASED",
    RunState.LEASE_LOST: "LEASE_LOST",
    RunState.UNREPORTED: "UNREPORTED",
}


class IllegalMove(RuntimeError):
    """A move TRANSITIONS does not allow: a bug of the runner's, never the database's."""


class RunLife:
    """One claimed run (the row claim_runs() returned) and where it is in its life."""

    __slots__ = ("run", "run_id", "state", "done")

    def __init__(self, run: dict):
        self.run = run
        self.run_id: int = run["run_id"]
        self.state = RunState.CLAIMED
        self.done: Done | None = None  # the handler's outcome, from DONE on

    def move(self, to: RunState, done: Done | None = None) -> None:
        """Moves to `to`; a DONE run carries its outcome, and an end sets the row's 'outcome'."""
        if to not in TRANSITIONS[self.state]:
            raise IllegalMove(f"run #{self.run_id}: {self.state.name} -> {to.name}")
        if to is RunState.DONE:
            if done is None:
                raise IllegalMove(f"run #{self.run_id}: DONE without an outcome")
            self.done = done
        self.state = to
        if to is RunState.REPORTED:
            assert self.done is not None  # only DONE runs get here
            self.run["outcome"] = self.done.outcome.status
        elif to in OUTCOMES:
            self.run["outcome"] = OUTCOMES[to]

    def __repr__(self) -> str:
        return f"RunLife(#{self.run_id}, {self.state.name})"
