"""Every interleaving of a scenario's scripts, depth first, each run from the seeded
ledger by replaying its prefix (a committed step cannot be undone), with state
hashing: a path that reaches a state already explored (the abstract state of
World.key: the ledger, the lock, every actor's place) stops there, since all that
follows from it was, or will be, explored from its first visit. Its alternatives
are queued when a state is first visited, so a cut loses nothing the abstraction
keeps.

An interleaving is one path run: to its end, or cut at a known state. On a
violation the path stops and its exact steps (setup included) are kept, as a replay
file a test replays (replay_text(), load_replay(), replay()).

sample() draws interleavings at random instead (seeded), each run to its end: the
large bound's, past what the abstraction merges."""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

from explore_world import Scenario, Step, World


@dataclass
class Found:
    scenario: str
    steps: list[Step]
    violation: str


@dataclass
class Report:
    interleavings: int = 0
    states: int = 0
    cut: int = 0  # of the interleavings, those that stopped at a known state
    diverged: int = 0  # replays that did not go as their first run (a harness fault)
    diverged_at: list[list[Step]] = field(default_factory=list)  # the first few, to show
    complete: bool = True  # every interleaving within the bound was explored
    evict_raced: int = 0  # evictions that spared the holder's work session (World._gone)
    found: list[Found] = field(default_factory=list)

    def summary(self) -> str:
        return f"explored {self.interleavings} interleavings, {self.states} states, {len(self.found)} violations"

    def add(self, other: Report) -> None:
        self.interleavings += other.interleavings
        self.states += other.states
        self.cut += other.cut
        self.diverged += other.diverged
        self.diverged_at += other.diverged_at
        self.complete = self.complete and other.complete
        self.evict_raced += other.evict_raced
        self.found += other.found

    def write(self, directory: Path) -> list[Path]:
        """Each violation as a replay file (replay_file()): `<scenario>-<n>.json`."""
        directory.mkdir(parents=True, exist_ok=True)
        paths = []
        for n, f in enumerate(self.found, 1):
            path = directory / f"{f.scenario}-{n}.json"
            path.write_text(replay_text(f) + "\n")
            paths.append(path)
        return paths


def replay_text(found: Found) -> str:
    """A violation as a replay file: the scenario's name, the violation as seen, and the
    exact steps (setup included), one per line; tests/explore/test_replays.py replays
    each file of tests/explore/replays/ (`expect`: "violation", or "none" once fixed)."""
    steps = ",\n".join(f"    {json.dumps(list(s))}" for s in found.steps)
    return (
        f'{{\n  "scenario": {json.dumps(found.scenario)},\n  "expect": "violation",\n'
        f'  "violation": {json.dumps(found.violation)},\n  "steps": [\n{steps}\n  ]\n}}'
    )


def load_replay(path: Path) -> dict:
    data = json.loads(path.read_text())
    data["steps"] = [tuple(s) for s in data["steps"]]
    return data


def explore(world: World, max_interleavings: int, deadline: float) -> Report:
    """Explores world.scenario until every interleaving was, `max_interleavings` were,
    or time.monotonic() passed `deadline`."""
    report = Report()
    seen: set[tuple] = set()
    todo: list[list[str]] = [[]]  # prefixes (the actors' choices after the setup)
    kinds: set[str] = set()  # a violation is kept once per kind (its first words)
    while todo:
        if report.interleavings >= max_interleavings or time.monotonic() > deadline:
            report.complete = False
            break
        prefix = todo.pop()
        report.interleavings += 1
        world.reset()
        violations: list[str] = []
        choices: list[str] = []
        for name in prefix:
            if name not in world.enabled():
                report.diverged += 1
                if len(report.diverged_at) < 3:
                    report.diverged_at.append([*world.trace, (name, "(not enabled)")])
                break
            choices.append(name)
            violations = world.step(name)
            if violations:
                break
        else:
            violations = _extend(world, choices, seen, todo, report)
        for v in violations:
            kind = " ".join(v.split()[:3])
            if kind not in kinds:
                kinds.add(kind)
                report.found.append(Found(world.scenario.name, list(world.trace), v))
    report.states = len(seen)
    return report


def _extend(world: World, choices: list[str], seen: set[tuple], todo: list[list[str]], report: Report) -> list[str]:
    """From the end of a replayed prefix on: the first enabled actor each time, the
    others queued, until the end, a known state, or a violation."""
    while True:
        key = world.key()
        if key in seen:
            report.cut += 1
            return []
        seen.add(key)
        enabled = world.enabled()
        while not enabled and world.pending:
            violations = world.settle_end()
            if violations:
                return violations
            enabled = world.enabled()
        if not enabled:
            return world.settle_end()
        for other in reversed(enabled[1:]):
            todo.append([*choices, other])
        choices.append(enabled[0])
        violations = world.step(enabled[0])
        if violations:
            return violations


def sample(world: World, max_interleavings: int, deadline: float, seed: int) -> Report:
    """Interleavings drawn at random (seeded), each run to its end with no cut: what the
    abstraction merges is run too, and a bounded run reaches every depth alike (a
    bounded depth-first search varies the last steps first). `interleavings` counts
    the distinct ones; `complete` is False unless repeats showed the scenario has no
    more (a draw of 20 repeats in a row)."""
    report = Report()
    rng = random.Random(f"{seed}/{world.scenario.name}")
    seen: set[tuple] = set()
    runs: set[tuple[Step, ...]] = set()
    kinds: set[str] = set()
    repeats = 0
    while repeats < 20:
        if len(runs) >= max_interleavings or time.monotonic() > deadline:
            report.complete = False
            break
        world.reset()
        violations: list[str] = []
        while not violations:
            seen.add(world.key())
            enabled = world.enabled()
            if enabled:
                violations = world.step(rng.choice(enabled))
                continue
            violations = world.settle_end()
            if not (world.pending or world.enabled()):
                break
        trace = tuple(world.trace)
        repeats = repeats + 1 if trace in runs else 0
        runs.add(trace)
        for v in violations:
            kind = " ".join(v.split()[:3])
            if kind not in kinds:
                kinds.add(kind)
                report.found.append(Found(world.scenario.name, list(world.trace), v))
    report.interleavings, report.states = len(runs), len(seen)
    return report


def replay(world: World, steps: list[Step]) -> list[str]:
    """Runs `steps` (setup included, as a Found has them) and then lets the world
    settle: the violations met."""
    world.reset()
    setup = len(world.scenario.setup)
    assert [tuple(s) for s in steps[:setup]] == [tuple(s) for s in world.scenario.setup], "not this scenario's setup"
    for name, step in steps[setup:]:
        # a step that came after a blocked one was cancelled: the settling first
        while not _next_is(world, name, step) and world.pending and not world.enabled():
            violations = world.settle_end()
            if violations:
                return violations
        if not _next_is(world, name, step):
            return [f"cannot replay {name} {step}: not enabled there"]
        violations = world.step(name)
        if violations:
            return violations
    while True:
        enabled = world.enabled()
        if not enabled:
            violations = world.settle_end()
            if violations or not (world.pending or world.enabled()):
                return violations
            continue
        violations = world.step(enabled[0])
        if violations:
            return violations


def _next_is(world: World, name: str, step: str) -> bool:
    return name in world.enabled() and world.next_step(name) == step


def scenarios_report(
    make_world, scenarios: list[Scenario], max_interleavings: int, seconds: float, seed: int | None = None
) -> Report:
    """Each scenario in turn, with an even share of the interleavings and of the time
    (what one leaves goes to the next): all explored, or with a `seed`, sampled."""
    total = Report()
    start = time.monotonic()
    for i, s in enumerate(scenarios):
        left = len(scenarios) - i
        deadline = time.monotonic() + (seconds - (time.monotonic() - start)) / left
        world = make_world(s)
        try:
            share = (max_interleavings - total.interleavings) // left
            r = explore(world, share, deadline) if seed is None else sample(world, share, deadline, seed)
        finally:
            world.close()
        r.evict_raced = world.evict_raced
        how = f"{r.cut} cut at a known state" if seed is None else "each run to its end"
        print(f"  {s.name}: {r.summary()} ({how}{'' if r.complete else ', bound reached'})")
        total.add(r)
    return total
