"""The explorer finds a bug when there is one: a planted scheduler that skips the lock
check (explore_planted.py) is reported with the exact steps that break the invariant,
those steps replay to the same violation from their file, and the same steps with the
real scheduler break nothing."""

from __future__ import annotations

import time

import pytest
from explore_explorer import Report, explore, load_replay, replay
from explore_planted import PLANTED, PLANTED_CONTROL
from explore_world import Scenario, Step

VIOLATION = "decided from work session"


@pytest.mark.slow
def test_the_explorer_reports_a_planted_bug_with_steps_that_replay_it(make_world, tmp_path):
    report = _explored(make_world, PLANTED)

    assert report.summary().startswith(f"explored {report.interleavings} interleavings, {report.states} states, ")
    assert report.found, report.summary()
    assert report.summary().endswith(f"{len(report.found)} violations")
    found = report.found[0]
    assert VIOLATION in found.violation
    # the crash of the planted scheduler's lock session comes before its decision
    names = [s[0] + " " + s[1] for s in found.steps]
    assert names.index("fault crash.a.lock") < names.index("a tick.decide")

    (path,) = report.write(tmp_path)
    data = load_replay(path)
    assert data["scenario"] == PLANTED.name and data["steps"] == found.steps
    assert any(VIOLATION in v for v in _replayed(make_world, PLANTED, data["steps"]))
    # the real scheduler (on its group's login) on the same steps: it holds
    assert _replayed(make_world, PLANTED_CONTROL, data["steps"]) == []


@pytest.mark.slow
def test_the_planted_scenario_with_the_real_scheduler_holds_in_every_interleaving(make_world):
    report = _explored(make_world, PLANTED_CONTROL)
    assert report.complete and report.diverged == 0
    assert not report.found, [f.violation for f in report.found]


def _explored(make_world, scenario: Scenario) -> Report:
    world = make_world(scenario)
    try:
        return explore(world, 500, time.monotonic() + 120)
    finally:
        world.close()  # (its sessions, and the lock one may hold, gone before the next world)


def _replayed(make_world, scenario: Scenario, steps: list[Step]) -> list[str]:
    world = make_world(scenario)
    try:
        return replay(world, steps)
    finally:
        world.close()
