"""The runner's numbers, one home each, on one object the daemon is given (River's
JobRescuerConfig is the model): a test or a benchmark passes its own instead of
patching module constants. The command line's options (lease, grace, batch,
concurrency) are the Runner's arguments; these are what no option sets."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RunnerSettings:
    # Claimed runs wait behind a running handler at most this long before another
    # handler thread takes them up or they are given back; and a batch grows only
    # while a whole batch takes less.
    release_after: float = 0.5
    # An outcome waits at most this long for the others of its batch before it is
    # reported (all are reported together when the handler thread runs out of work).
    report_after: float = 0.01
    # Heartbeats at a third of the lease, never more often than this.
    min_heartbeat_interval: float = 0.2
    # An idle runner re-checks next_claimable_at at least this often, and waits at
    # least min_idle for a run due sooner.
    max_idle: float = 5.0
    min_idle: float = 0.01
    # NOTIFY wake-ups at most this often: any login can send one.
    min_wake_interval: float = 0.05
    # While stopping (the container's stop timeout is near), a report that fails is
    # retried this long at most, not until the leases would be gone.
    stopping_report_retry: float = 5.0


DEFAULTS = RunnerSettings()
