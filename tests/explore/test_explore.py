"""The interleaving explorer (explore_*.py) against the real SQL; no invariant may break
in any interleaving. The CI bound explores every order of each scenario's steps
(depth first, cut at a known state); `make explore` (SCRINALIA_EXPLORE=1) draws at
least 10,000 distinct interleavings at random (SCRINALIA_EXPLORE_SEED), each run to
its end.

A violation is printed with its exact steps and written as a replay file to
SCRINALIA_EXPLORE_OUT (default explore-found/): copied into tests/explore/replays/,
test_replays.py replays it."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from explore_explorer import Report, replay_text, scenarios_report
from explore_scenarios import (
    CI_INTERLEAVINGS,
    CI_SECONDS,
    LARGE_INTERLEAVINGS,
    LARGE_SCENARIOS,
    LARGE_SECONDS,
    SCENARIOS,
)

OUT = Path(os.environ.get("SCRINALIA_EXPLORE_OUT", "explore-found"))


def _explore(make_world, interleavings: int, seconds: float, seed: int | None = None) -> Report:
    start = time.monotonic()
    scenarios = SCENARIOS if seed is None else LARGE_SCENARIOS
    report = scenarios_report(make_world, scenarios, interleavings, seconds, seed)
    how = f"{report.cut} cut at a known state" if seed is None else f"drawn with seed {seed}, each run to its end"
    print(f"{report.summary()} in {time.monotonic() - start:.0f} s ({how})")
    if report.evict_raced:
        print(
            f"{report.evict_raced} evictions spared the evicted holder's work session"
            " (a standby's heartbeat overwrote it first; the harness ended it)"
        )
    for d in report.diverged_at:
        print(f"DIVERGED (a harness fault: a replayed prefix went otherwise): {d}")
    if report.found:
        for f, path in zip(report.found, report.write(OUT), strict=True):
            print(f"VIOLATION in {f.scenario}: {f.violation}\nreplay file {path}:\n{replay_text(f)}")
    return report


def _failures(report: Report) -> str:
    return "\n".join(f"{f.scenario}: {f.violation}: {f.steps}" for f in report.found)


@pytest.mark.slow
def test_no_interleaving_within_the_ci_bound_breaks_an_invariant(make_world):
    report = _explore(make_world, CI_INTERLEAVINGS, CI_SECONDS)
    assert report.diverged == 0
    assert report.interleavings >= len(SCENARIOS)
    assert not report.found, _failures(report)


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("SCRINALIA_EXPLORE"), reason="make explore runs it (SCRINALIA_EXPLORE=1)")
def test_no_interleaving_within_the_large_bound_breaks_an_invariant(make_world):
    report = _explore(make_world, LARGE_INTERLEAVINGS, LARGE_SECONDS, int(os.environ.get("SCRINALIA_EXPLORE_SEED", 1)))
    assert report.diverged == 0
    assert report.interleavings >= 10_000, report.summary()
    assert not report.found, _failures(report)
