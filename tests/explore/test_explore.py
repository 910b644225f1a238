"""The interleaving explorer (explore_*.py): every order of the scenarios' steps, up to
a bound, against the real SQL; no invariant may break in any of them."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from explore_explorer import scenarios_report
from explore_scenarios import CI_INTERLEAVINGS, CI_SECONDS, LARGE_INTERLEAVINGS, LARGE_SECONDS, SCENARIOS

# where a run writes the violations it found, as a list a test loads (test_found.py)
OUT = Path(os.environ.get("SCRINALIA_EXPLORE_OUT", "explore-found.py"))


def _explore(make_world, interleavings: int, seconds: float):
    start = time.monotonic()
    report = scenarios_report(make_world, SCENARIOS, interleavings, seconds)
    print(f"{report.summary()} in {time.monotonic() - start:.0f} s ({report.cut} cut at a known state)")
    if report.found:
        report.write(OUT)
        for f in report.found:
            print(f"VIOLATION in {f.scenario}: {f.violation}\n  steps: {f.steps}")
    return report


@pytest.mark.slow
def test_no_interleaving_within_the_ci_bound_breaks_an_invariant(make_world):
    report = _explore(make_world, CI_INTERLEAVINGS, CI_SECONDS)
    assert report.diverged == 0
    assert report.interleavings >= len(SCENARIOS)
    assert not report.found, "\n".join(f"{f.scenario}: {f.violation}: {f.steps}" for f in report.found)


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("SCRINALIA_EXPLORE"), reason="make explore runs it (SCRINALIA_EXPLORE=1)")
def test_no_interleaving_within_the_large_bound_breaks_an_invariant(make_world):
    report = _explore(make_world, LARGE_INTERLEAVINGS, LARGE_SECONDS)
    assert report.diverged == 0
    assert not report.found, "\n".join(f"{f.scenario}: {f.violation}: {f.steps}" for f in report.found)
