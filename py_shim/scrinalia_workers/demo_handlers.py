"""Handlers for the demo and the tests: each run does what its options say.

options.seconds       how long the work takes (default 0.2)
options.fail_attempts fail while the attempt is at most this (default 0: never)
options.fail_rate     fail with this probability (default 0), for load tests
"""

from __future__ import annotations

import random
import time

DEMO_OPTIONS = {
    "seconds": {"type": "number"},
    "fail_attempts": {"type": "integer"},
    "fail_rate": {"type": "number"},
}


class SimulatedFailure(RuntimeError):
    pass


def work(run: dict) -> None:
    opts = (run.get("config") or {}).get("options") or {}
    time.sleep(float(opts.get("seconds", 0.2)))
    if run["attempt"] <= int(opts.get("fail_attempts", 0)):
        raise SimulatedFailure(f"simulated failure on attempt {run['attempt']}")
    if random.random() < float(opts.get("fail_rate", 0)):
        raise SimulatedFailure("simulated random failure")


HANDLERS = {"*": work}
