"""The scheduler's numbers, one home each, on one object the daemon is given (River's
JobRescuerConfig is the model): a test or a benchmark passes its own instead of
patching module constants, and the command line's defaults are these."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SchedulerSettings:
    # a standby looks at the holder this often (--standby-retry)
    standby_retry: float = 3.0
    # the longest wait between two passes (--max-sleep)
    max_sleep: float = 5.0
    # NOTIFY wake-ups at most this often: any login can send one (--min-wake-interval)
    min_wake_interval: float = 0.2
    # Due schedules per tick transaction. Each chunk costs a transaction, a due query
    # over all that is still due, a planning and a config resolution, about a tenth of
    # a 5,000 chunk's work: a minute's usual load fits in one; a larger spike's first
    # runs are visible while the rest is decided (one at a known instant is prepared
    # ahead anyway).
    tick_chunk: int = 20_000
    # A chunk with fewer decisions is logged at once, not by the lines' thread: it
    # would gain nothing, and its lines come out as soon as it is committed.
    thread_lines: int = 1000
    # Chunks per pass at most (a million schedules); the next pass goes on at once.
    max_chunks: int = 1000
    # How often a holder looks for stored instants no cron or policy produces (a clock
    # that ran ahead, a forged write): at its first pass, then at the first pass this
    # long after the last look. With passes at least every max_sleep, a bad instant is
    # repaired within this plus one sleep of being written.
    repair_every: float = 60.0
    # The schedules of one instant prepared ahead of it, at most (scheduler.prepared).
    prepared_limit: int = 10_000


DEFAULTS = SchedulerSettings()
