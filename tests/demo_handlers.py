"""Handlers for the runner tests: one per behaviour, selected by worker name."""

import os
import time


def ok(run):
    return "ok"


def boom(run):
    raise RuntimeError(f"boom on attempt {run['attempt']}")


def slow(run):
    # SLOW_SECONDS lets a test make a handler outlive its lease
    time.sleep(float(os.environ.get("SCRINALIA_TEST_SLOW", "4")))


def hang(run):
    time.sleep(600)


def flaky(run):
    if run["attempt"] == 1:
        raise ConnectionError("transient")


HANDLERS = {"ok": ok, "boom": boom, "slow": slow, "hang": hang, "flaky": flaky}


def polite(run):
    """Works in steps until told to stop; returns why (the runner drops it: nothing counts)."""
    from scrinalia_workers.runner import context

    while not context.sleep(0.05):
        pass
    print(f"told to stop: {context.stop_reason()}", flush=True)


HANDLERS["polite"] = polite
