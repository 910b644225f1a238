"""The life of one claimed run inside the runner, as states and the moves between them.

The runner holds a run (a ClaimedRun, runner/run.py) from its claim to one of four
ends; the batch loop (runner/batch.py) moves each run through these states, and
nothing else does:

    CLAIMED   claim_runs() returned it; its "claimed" line is logged.
    HANDED    handed to the handler thread: waiting its turn behind another run, or
              running. Its lease is heartbeated (every lease/3, one call per batch).
    LOST      a heartbeat answered that its lease is lost (another party owns the run
              now); its handler still runs, or has not started.
    DONE      its handler returned (or the grace after a stop ran out: INTERRUPTED
              "runner shut down"); its outcome waits at most report_after for the
              others of its batch, then finish_runs() reports them together.
  ends (ClaimedRun.end says which):
    REPORTED     finish_runs() recorded its outcome.                end: the status
    RELEASED     given back unstarted (release_runs): a slow handler
                 held it up past release_after, or the runner stops. end: RELEASED
    LEASE_LOST   nothing reported: a heartbeat or finish_runs()
                 answered that the lease is lost.                   end: LEASE_LOST
    UNREPORTED   the database stayed away for the lease's length
                 (a few seconds when stopping); the reaper ends it.  end: UNREPORTED

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

# How a run left the runner (ClaimedRun.end) for the ends other than REPORTED (a
# REPORTED run's end is the status reported).
ENDS = {
    RunState.RELEASED: "RELEASED",
    RunState.LEASE_LOST: "LEASE_LOST",
    RunState.UNREPORTED: "UNREPORTED",
}


class IllegalMove(RuntimeError):
    """A move TRANSITIONS does not allow: a bug of the runner's, never the database's."""
