"""Every replay file in tests/explore/replays/: its steps run again, exactly, against
the real SQL. A violation the explorer found is kept there (as `make explore` writes
it) with `"expect": "violation"` until it is fixed, then with `"expect": "none"`: a
regression test of that very interleaving."""

from __future__ import annotations

from pathlib import Path

import pytest
from explore_explorer import load_replay, replay
from explore_planted import PLANTED, PLANTED_CONTROL
from explore_scenarios import OWNER_SCHEDULER, SCENARIOS

REPLAYS = sorted((Path(__file__).parent / "replays").glob("*.json"))
BY_NAME = {s.name: s for s in (*SCENARIOS, OWNER_SCHEDULER, PLANTED, PLANTED_CONTROL)}


@pytest.mark.parametrize("path", REPLAYS, ids=[p.stem for p in REPLAYS])
def test_a_kept_interleaving_replays_as_expected(make_world, path):
    data = load_replay(path)
    world = make_world(BY_NAME[data["scenario"]])
    violations = replay(world, data["steps"])
    if data["expect"] == "violation":
        kind = " ".join(data["violation"].split()[:4])
        assert any(v.startswith(kind) for v in violations), violations
    else:
        assert violations == []
        # an eviction ends the evicted holder's work session itself (evict_lock_holder
        # reads it before it ends the holder), never leaving it to the harness
        assert world.evict_raced == 0


def test_every_replay_names_a_known_scenario_and_what_it_expects():
    for p in REPLAYS:
        data = load_replay(p)
        assert data["scenario"] in BY_NAME, p.name
        assert data["expect"] in ("violation", "none"), p.name
        assert data["steps"], p.name
