"""The scenarios: a small script per actor, and the bounds the explorer runs them to.

Each scenario is an interleaving nobody wrote down, or the family of them: the
explorer tries every order of its actors' steps (a fault's crash or clock step at
any point among them). The bound is per run: at most that many interleavings, each
scenario an even share, within a time limit."""

from __future__ import annotations

import os

from explore_actors import Scheduler
from explore_world import Scenario

TICK = ["tick.check", "tick.decide", "tick.commit"]
# a scheduler that takes the lock and ticks once, as set-up
HOLDS = [("a", "take_lock"), ("a", "heartbeat")]
TICKED = HOLDS + [("a", s) for s in TICK]

# (the slowest last: a scenario done early leaves its time to those after it)
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
    # a runner killed mid-run (its connection lost) while its lease runs out: the
    # reaper ends the run, the retry is made, and the runner, back, reports with its
    # old token
    Scenario(
        "runner-crash-reaped",
        {
            "r": ("runner", ["heartbeat", "finish_ok"]),
            "a": ("scheduler", ["reap", "retries", *TICK]),
            "fault": ("fault", ["crash.r.conn", "clock.leases_expire"]),
        },
        setup=[*TICKED, ("r", "claim")],
    ),
    # the holder's work session killed at any step of two ticks (its transaction rolled
    # back), a new period meanwhile; the holder drops its lock and queues again, the
    # standby takes over
    Scenario(
        "work-session-crash",
        {
            "a": ("scheduler", [*TICK, "take_lock", "heartbeat", *TICK]),
            "b": ("scheduler", ["take_lock", "heartbeat", *TICK]),
            "fault": ("fault", ["crash.a.work"]),
            "clock": ("fault", ["clock.period_passes"]),
        },
        setup=HOLDS,
    ),
    # a runner's login that sends what decides, first without the lock's key, then
    # with the key taken by hand; the scheduler waits for the key, evicts it, and ticks
    Scenario(
        "runner-as-scheduler",
        {
            "x": ("rogue", ["retries", "tick.check", "squat", "retries", "reap", *TICK]),
            "a": ("scheduler", ["take_lock", "evict", "heartbeat", *TICK]),
        },
    ),
    # an operator's enqueue left in an open transaction against two ticks; it commits,
    # or its session is killed, at any step
    Scenario(
        "careless-open-enqueue",
        {
            "op": ("operator", ["begin", "enqueue", "commit", "pause"]),
            "a": ("scheduler", [*TICK, "retries", *TICK]),
            "fault": ("fault", ["crash.op.conn"]),
            "clock": ("fault", ["clock.period_passes"]),
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

# The real scheduler logged in as the schema's owner loses its lock between its tick's
# lock check and its decision. check_scheduler_caller trusted the owner, so that chunk
# was decided beside the new holder (replays/owner-scheduler-*.json); a scheduler
# process is now held to the lock whoever it logs in as.
OWNER_SCHEDULER = Scenario(
    "owner-scheduler",
    {
        "a": ("owner-scheduler", [*TICK]),
        "b": ("scheduler", ["take_lock", "heartbeat", *TICK]),
        "fault": ("fault", ["crash.a.lock"]),
    },
    setup=HOLDS,
    kinds={"owner-scheduler": Scheduler},
)
SCENARIOS.append(OWNER_SCHEDULER)

# CI (`make test`): every scenario explored whole (depth first, cut at known states),
# within 5 minutes on the shared 2-core machine; the caps only keep a slower machine
# inside them (a scenario cut short by them says "bound reached")
CI_INTERLEAVINGS, CI_SECONDS = int(os.environ.get("EXPLORE_N") or 4000), 240.0
# `make explore`: at least 10,000 distinct interleavings drawn at random, each run to
# its end, within 40 minutes; the scenarios with the most interleavings last, so that
# what a smaller one leaves of its share goes to them
LARGE_INTERLEAVINGS, LARGE_SECONDS = 12000, 2400.0
_MOST = ("operator-and-tick", "careless-open-enqueue", "retry-across-restart")
LARGE_SCENARIOS = [s for s in SCENARIOS if s.name not in _MOST] + [s for n in _MOST for s in SCENARIOS if s.name == n]
