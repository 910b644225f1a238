"""The demo's workers and their handlers (the runner's `--handlers` in the demo set-up).

Only the demo's own workers are named here, never "*": a runner started with this
module claims the runs of `demo-*` workers and nothing else, so a stack that forgot
to name its own handlers idles instead of running real workers' runs with fake work.
Each run does what its request's options say:

options.seconds       how long the work takes (default 0.2)
options.overrun       then work on until this many seconds past the next minute (UTC),
                      so that the next period of an every-minute schedule finds it active
options.fail_attempts fail while the attempt is at most this (default 0: never)
options.fail_rate     fail with this probability (default 0), for load tests

This module imports nothing of the demo's throwaway-cluster code.
"""

from __future__ import annotations

import random
import time

# The option catalogue of every demo worker (scrinalia.register_worker's p_options).
DEMO_OPTIONS = {
    "seconds": {"type": "number"},
    "overrun": {"type": "number"},
    "fail_attempts": {"type": "integer"},
    "fail_rate": {"type": "number"},
}

# name -> (cron, the request each scheduled run gets, what it shows)
WORKERS = {
    "demo-thumbnails": (
        "* * * * *",
        {"options": {"seconds": 0.5}},
        "every minute, a quick job: one enqueue per minute",
    ),
    "demo-ocr": (
        "* * * * *",
        {"options": {"seconds": 0.5, "overrun": 3}},
        "every minute, but each run works until 3 s past the next minute: that period is skipped",
    ),
    "demo-reindex": (
        "0 3 * * *",
        {"options": {"seconds": 0.5}},
        "nightly at 03:00 UTC: after days without a scheduler, one catch-up run",
    ),
    "demo-export": (
        "*/5 * * * *",
        {"options": {"seconds": 0.5, "fail_attempts": 1}},
        "every five minutes, fails on attempt 1, then its retry succeeds",
    ),
}


class SimulatedFailure(RuntimeError):
    pass


def work(run: dict) -> None:
    opts = (run.get("config") or {}).get("options") or {}
    seconds = float(opts.get("seconds", 0.2))
    if "overrun" in opts:
        now = time.time()
        seconds = max(seconds, 60 - now % 60 + float(opts["overrun"]))
    time.sleep(seconds)
    if run["attempt"] <= int(opts.get("fail_attempts", 0)):
        raise SimulatedFailure(f"simulated failure on attempt {run['attempt']} (demo: the first attempt always fails)")
    if random.random() < float(opts.get("fail_rate", 0)):
        raise SimulatedFailure("simulated random failure")


HANDLERS = {name: work for name in WORKERS}
