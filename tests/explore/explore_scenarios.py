"""The scenarios: a small script per actor, and the bounds the explorer runs them to.

Each scenario is an interleaving nobody wrote down, or the family of them: the
explorer tries every order of its actors' steps (a fault's crash or clock step at
any point among them). The bound is per run: at most that many interleavings, each
scenario an even share, within a time limit."""

from __future__ import annotations

import os

from explore_world import Scenario

TICK = ["tick.check", "tick.decide", "tick.commit"]
# a scheduler that takes the lock and ticks once, as set-up
HOLDS = [("a", "take_lock"), ("a", "heartbeat")]
TICKED = HOLDS + [("a", s) for s in TICK]

SCENARIOS = [
    # two schedulers race for the lock and tick; the first's lock session may crash
    # at any step (its work session lives on, mid-tick)
    Scenario(
        "two-schedulers-crash",
        {
            "a": ("scheduler", ["take_lock", "heartbeat", *TICK]),
            "b": ("scheduler", ["take_lock", "heartbeat", *TICK]),
            "fault": ("fault", ["crash.a.lock"]),
        },
    ),
    # a squatter (a reader login) takes the key, is evicted by the standby, reconnects
    # and takes it again; the standby waits in the lock's queue meanwhile
    Scenario(
        "squatter-between-evictions",
        {
            "s": ("squatter", ["squat", "squat"]),
            "a": ("scheduler", ["take_lock", "evict", "evict", "heartbeat", *TICK]),
        },
    ),
    # a runner whose lease runs out, is reaped or cancelled, and reports all the same
    Scenario(
        "fenced-runner",
        {
            "r": ("runner", ["heartbeat", "finish_fail"]),
            "a": ("scheduler", ["reap", "retries"]),
            "op": ("operator", ["cancel"]),
            "fault": ("fault", ["clock.leases_expire"]),
        },
        setup=[*TICKED, ("r", "claim")],
    ),
    # the operator's manual run, cancel and schedule change against a tick, a new period
    Scenario(
        "operator-and-tick",
        {
            "a": ("scheduler", [*TICK, "retries"]),
            "op": ("operator", ["enqueue", "put_schedule", "cancel"]),
            "r": ("runner", ["claim", "finish_fail"]),
            "fault": ("fault", ["clock.period_passes"]),
        },
        setup=HOLDS,
    ),
    # a failed period's retry, its window, and a restart of the scheduler between
    Scenario(
        "retry-across-restart",
        {
            "a": ("scheduler", ["retries", *TICK]),
            "b": ("scheduler", ["take_lock", "heartbeat", "retries", "tick.check", "tick.decide", "tick.commit"]),
            "r": ("runner", ["claim", "finish_ok"]),
            "fault": ("fault", ["crash.a.lock", "clock.retry_due"]),
        },
        setup=[*TICKED, ("r", "claim"), ("r", "finish_fail")],
    ),
    # a frozen holder (its heartbeat stale) evicted by a standby, mid-tick
    Scenario(
        "stale-holder-evicted",
        {
            "a": ("scheduler", [*TICK, "reap"]),
            "b": ("scheduler", ["take_lock", "evict", "heartbeat", *TICK]),
            "fault": ("fault", ["clock.heartbeat_stale", "clock.period_passes"]),
        },
        setup=TICKED,
    ),
]

# CI (`make test`): within 5 minutes on a shared machine
CI_INTERLEAVINGS, CI_SECONDS = int(os.environ.get("EXPLORE_N", 900)), 210.0
# `make explore`: at least 10,000 interleavings, within an hour
LARGE_INTERLEAVINGS, LARGE_SECONDS = 12000, 3600.0
