"""Both daemons run with the collector of scrinalia_workers.collector: start-up objects
frozen, the youngest generation collected every YOUNG_THRESHOLD allocations, and
reference cycles still collected. Each in a fresh interpreter: the settings are the
process's."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from scrinalia_workers.collector import YOUNG_THRESHOLD

# a main that stops at once, exit 2 (misconfiguration), once it has started
DAEMONS = {
    "scheduler": (
        "scrinalia_workers.scheduler.command",
        ["--dsn", "host=127.0.0.1 port=1 connect_timeout=1", "--wait-for-database", "0"],
    ),
    "runner": (
        "scrinalia_workers.runner.command",
        ["--dsn", "host=127.0.0.1 port=1 connect_timeout=1", "--handlers", "json"],
    ),
}

PROBE = """
import gc, importlib, json, sys
main = importlib.import_module(sys.argv[1]).main
before = (gc.get_threshold(), gc.get_freeze_count())
code = main(json.loads(sys.argv[2]))
print(json.dumps({"code": code, "before": before, "after": (gc.get_threshold(), gc.get_freeze_count())}))
"""


def _probe(module: str, argv: list[str]) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, module, json.dumps(argv)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("daemon", sorted(DAEMONS))
def test_a_daemon_starts_with_its_start_up_frozen_and_the_young_collected_less_often(daemon):
    module, argv = DAEMONS[daemon]
    got = _probe(module, argv)
    assert got["code"] == 2
    (young_before, *_), frozen_before = got["before"]
    (young_after, *_), frozen_after = got["after"]
    assert young_before != YOUNG_THRESHOLD and frozen_before == 0  # the interpreter's own
    assert young_after == YOUNG_THRESHOLD
    assert frozen_after > 1000  # the modules' objects, out of every collection


def test_reference_cycles_are_still_collected_after_the_tuning():
    script = f"""
import gc, weakref
from scrinalia_workers.collector import tune_for_daemon
tune_for_daemon()
class Node: pass
a, b = Node(), Node()
a.other, b.other = b, a
gone = weakref.ref(a)
del a, b
junk = [[] for _ in range({YOUNG_THRESHOLD} * 2)]  # allocations enough for a collection
print(gone() is None)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"
