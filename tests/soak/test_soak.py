"""The fault soak (soak.py) for SOAK_MINUTES (5 unless told): every kind of fault
injected under the real daemons, then no period doubled or lost without a reason, every
retry in its window, never two live runs for a worker, and the daemons' connections,
descriptors and memory flat. A failure names the seed; SOAK_SEED=... replays it."""

from __future__ import annotations

import os
import random
import shutil

import pytest

from infra import _unavailable
from soak import print_report, run
from soak_faults import KINDS, timetable

MINUTES = float(os.environ.get("SOAK_MINUTES", "5"))


def test_the_timetable_is_the_seeds_alone():
    daemons, runners = ["s1", "s2", "r1", "r2", "r3"], ["r1", "r2", "r3"]
    planned = timetable(42, 5, daemons, runners)
    assert planned == timetable(42, 5, daemons, runners)
    assert planned != timetable(43, 5, daemons, runners)
    assert {f.kind for f in planned} == set(KINDS)  # every kind fits in a CI run
    assert all(f.at < 5 * 60 for f in planned)


@pytest.mark.slow
@pytest.mark.reliability
def test_the_daemons_keep_the_invariants_through_a_fault_soak(tmp_path):
    if not shutil.which("faketime"):
        _unavailable("needs faketime (apt-get install faketime; .ci/run installs it)")
    seed = int(os.environ.get("SOAK_SEED") or random.SystemRandom().randrange(1, 2**31))
    report = run(MINUTES, seed, tmp_path)
    print_report(report)
    assert report.problems == [], f"seed {seed} (replay: SOAK_SEED={seed}): {report.problems[:20]}"
    assert set(report.faults) == set(KINDS), f"seed {seed}: only {report.summary()}"
    restarted = sum(sum(r.values()) for r in report.restarts.values())
    assert restarted >= report.faults["kill -9"], report.restarts  # each killed daemon came back
    assert report.invariants["periods checked"] >= 1000 * (MINUTES - 1)
