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
