"""The house keeps its shape: rooms by process, arrows between rooms only where
ARCHITECTURE.md draws them, no import circle, no oversized module, and nothing but the
demo (and the CLI command that starts it) reaching into the demo."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "py_shim" / "scrinalia_workers"
MAX_LINES = 450
ROOMS = ("scheduler", "runner", "cli", "web", "presentation", "admin", "demo", "gateway", "testkit")
# The rooms each room may import (ARCHITECTURE.md, "Arrows only point down"): the CLI is
# the top (it starts the daemons, the web view, the demo and the admin work); the CLI and
# the web view word what they show alike (presentation); the demo sets up its
# throwaway server (testkit) and migrates it (admin); the daemons and admin reach the
# database through the gateway only; the gateway and the testkit import no room.
ALLOWED = {
    "cli": {"admin", "demo", "scheduler", "runner", "web", "presentation", "gateway"},
    "web": {"presentation", "gateway"},
    "presentation": {"gateway"},
    "demo": {"admin", "testkit", "gateway"},
    "scheduler": {"gateway"},
    "runner": {"gateway"},
    "admin": {"gateway"},
    "gateway": set(),
    "testkit": set(),
}


def _modules(base: Path, prefix: str) -> dict[str, Path]:
    found = {}
    for f in base.rglob("*.py"):
        parts = list(f.relative_to(base).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join([prefix, *parts])] = f
    return found


def _all_modules() -> dict[str, Path]:
    return {**_modules(PACKAGE, "scrinalia_workers"), **_modules(ROOT / "bench", "bench")}


def _imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ours `name` imports, at any depth of its code (lazy imports too)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")
                base = ".".join(up[: len(up) - node.level + 1] + ([base] if base else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def _graph() -> dict[str, set[str]]:
    known = _all_modules()
    return {name: _imports(name, path, known) for name, path in known.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            # a package's __init__ importing its own submodule is how packages export
            if m.startswith(n + "."):
                continue
            if state.get(m) == 1:
                return stack[stack.index(m) :] + [m]
            if m not in state and (found := visit(m)):
                return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (found := visit(n)):
            return found
    return None


def test_the_package_is_laid_out_by_process():
    for room in ROOMS:
        assert (PACKAGE / room / "__init__.py").is_file(), room


def test_no_import_circle_in_the_package_or_the_bench():
    graph = _graph()
    assert len(graph) > 40, "the import graph is suspiciously small"
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_the_circle_finder_finds_a_circle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_module_over_the_size_limit():
    over = {
        str(p.relative_to(ROOT)): n
        for p in [*PACKAGE.rglob("*.py"), *(ROOT / "bench").rglob("*.py")]
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not over, over


def _room(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "scrinalia_workers" and len(parts) > 1 and parts[1] in ROOMS else None


def _forbidden(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """The imports from one room into another that ALLOWED does not draw."""
    return sorted(
        (name, m)
        for name, deps in graph.items()
        if (a := _room(name))
        for m in deps
        if (b := _room(m)) and b != a and b not in ALLOWED[a]
    )


def test_rooms_import_only_the_rooms_below_them():
    assert set(ALLOWED) == set(ROOMS)
    assert _forbidden(_graph()) == []


def test_a_forbidden_arrow_is_found():
    graph = {
        "scrinalia_workers.runner.daemon": {"scrinalia_workers.scheduler.tick", "scrinalia_workers.gateway"},
        "scrinalia_workers.gateway.checks": {"scrinalia_workers.admin.migrate"},
        "scrinalia_workers.cli.app": {"scrinalia_workers.runner", "scrinalia_workers.admin"},
    }
    assert _forbidden(graph) == [
        ("scrinalia_workers.gateway.checks", "scrinalia_workers.admin.migrate"),
        ("scrinalia_workers.runner.daemon", "scrinalia_workers.scheduler.tick"),
    ]


def test_only_the_demo_and_the_command_that_starts_it_import_the_demo():
    allowed = {"scrinalia_workers.cli.commands.demo", "scrinalia_workers.cli.app"}
    offenders = {
        name: sorted(m for m in deps if m.startswith("scrinalia_workers.demo"))
        for name, deps in _graph().items()
        if not name.startswith("scrinalia_workers.demo")
        and name not in allowed
        and any(m.startswith("scrinalia_workers.demo") for m in deps)
    }
    assert not offenders, offenders


def test_the_shared_modules_import_no_room():
    shared = ("errors", "clock", "text", "logs", "exits", "cron", "sqlfiles", "argtypes", "inputs", "collector")
    graph = _graph()
    for s in shared:
        rooms = [m for m in graph[f"scrinalia_workers.{s}"] if m.split(".")[1] in ROOMS]
        assert not rooms, (s, rooms)


def test_test_modules_have_unique_names():
    """pytest imports test modules by their file name (no __init__.py in tests/): two
    of one name in different folders stop the whole run at collection."""
    names = [p.name for p in (ROOT / "tests").rglob("test_*.py")]
    assert len(names) > 50
    assert sorted({n for n in names if names.count(n) > 1}) == []
