"""The soak's handlers: most runs are quick, some fail, some run slowly, a few run past
their worker's maximum run time, and every run of a runner the soak told to hang hangs.

What a run does is drawn from its run id (the same run does the same thing whenever it
is run again). A runner is told to hang by a file named hang-<its pid> in
SOAK_CONTROL_DIR: from then on each of its handler calls waits forever, so that all its
handler threads end up held, its runs reaped at their maximum run time, and the runner
exits (code 3) once its --grace has passed; its supervisor starts a fresh one.
"""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path

FAIL = 0.05  # share of runs that raise
SLOW = 0.03  # share that sleep SLOW_SECONDS
OVERRUN = 0.002  # share that sleep past the maximum run time (the soak sets it to MAX_RUN_SECONDS)
SLOW_SECONDS = (1.0, 3.0)
MAX_RUN_SECONDS = 8
OVERRUN_SECONDS = MAX_RUN_SECONDS + 4

_CONTROL = Path(os.environ.get("SOAK_CONTROL_DIR", "/nonexistent"))
_never = threading.Event()


class SoakFailure(RuntimeError):
    """A handler's failure, drawn at random: the run is retried under the ADR's rule."""


def work(run: dict) -> str:
    if (_CONTROL / f"hang-{os.getpid()}").exists():
        _never.wait()  # hung: only the runner's exit ends this thread
    draw = random.Random(run["run_id"]).random()
    if draw < FAIL:
        raise SoakFailure(f"run #{run['run_id']} failed on purpose")
    if draw < FAIL + SLOW:
        time.sleep(random.Random(-run["run_id"]).uniform(*SLOW_SECONDS))
        return "slow"
    if draw < FAIL + SLOW + OVERRUN:
        time.sleep(OVERRUN_SECONDS)
        return "overran"
    return "ok"


HANDLERS = {"*": work}
