"""Every interleaving of a scenario's scripts, depth first, each run from the seeded
ledger by replaying its prefix (a committed step cannot be undone), with state
hashing: a path that reaches a state already explored (the abstract state of
World.key: the ledger, the lock, every actor's place) stops there, since all that
follows from it was, or will be, explored from its first visit. Its alternatives
are queued when a state is first visited, so a cut loses nothing the abstraction
keeps.

An interleaving is one path run: to its end, or cut at a known state. On a
violation the path stops and its exact steps (setup included) are kept, as a list a
test replays (replay())."""

from __future__ import annotations

import pprint
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
    complete: bool = True  # every interleaving within the bound was explored
    found: list[Found] = field(default_factory=list)

    def summary(self) -> str:
        return f"explored {self.interleavings} interleavings, {self.states} states, {len(self.found)} violations"

    def add(self, other: Report) -> None:
        self.interleavings += other.interleavings
        self.states += other.states
        self.cut += other.cut
        self.diverged += other.diverged
        self.complete = self.complete and other.complete
        self.found += other.found

    def write(self, path: Path) -> None:
        """The violations as a Python list literal (tests/explore/test_found.py loads one)."""
        items = [{"scenario": f.scenario, "violation": f.violation, "steps": f.steps} for f in self.found]
        path.write_text(
            "# written by the interleaving explorer: replay each with test_found.py\n"
            f"FOUND = {pprint.pformat(items, width=110)}\n"
        )


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


def scenarios_report(make_world, scenarios: list[Scenario], max_interleavings: int, seconds: float) -> Report:
    """Each scenario in turn, with an even share of the interleavings and of the time."""
    total = Report()
    start = time.monotonic()
    for i, s in enumerate(scenarios):
        left = len(scenarios) - i
        deadline = time.monotonic() + (seconds - (time.monotonic() - start)) / left
        world = make_world(s)
        try:
            r = explore(world, (max_interleavings - total.interleavings) // left, deadline)
        finally:
            world.close()
        print(f"  {s.name}: {r.summary()} ({r.cut} cut at a known state{'' if r.complete else ', bound reached'})")
        total.add(r)
    return total
