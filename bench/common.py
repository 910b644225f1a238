"""What every benchmark shares: connections, timing, percentiles, the result shape."""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from scrinalia_workers.gateway.connection import connect

now = time.perf_counter
ROOT = Path(__file__).resolve().parent.parent
# The metrics' tallies brought up to date (86_tallies.sql): the deltas a seeding or the
# benchmark's own deletions left, which a running scheduler folds as they come.
FOLD_SQL = "SELECT scrinalia.fold_tallies()"


def child_env() -> dict[str, str]:
    """The environment a benchmark's child process needs on top of ours: the bench
    package importable (its handler modules, bench.notify_runner)."""
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


class InvariantError(AssertionError):
    """A benchmark's own correctness check failed: its figures mean nothing."""


def check(cond: bool, message: str) -> None:
    if not cond:
        raise InvariantError(message)


def conn(dsn: str, autocommit: bool = True, name: str = "scrinalia-bench") -> psycopg.Connection:
    return connect(dsn, autocommit=autocommit, application_name=name)


def verdict(ok: bool) -> str:
    """A row's verdict, as every section words it."""
    return "met" if ok else "NOT met"


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100) of a non-empty list."""
    s = sorted(values)
    k = max(0, min(len(s) - 1, int(round(p / 100 * len(s) + 0.5)) - 1))
    return s[k]


def median(values: list[float]) -> float:
    return statistics.median(values)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def secs(seconds: float) -> str:
    return f"{seconds:.3f} s"


@dataclass
class Result:
    """One benchmark's outcome, as printed and as written to BENCHMARKS.md."""

    key: str
    title: str
    setup: list[str]
    headers: list[str]
    rows: list[list[str]]
    target: str
    met: bool | None  # None: no target applies, or it could not be measured
    notes: list[str] = field(default_factory=list)
    headline: str = ""  # the figure the summary table shows
    extra_md: str = ""  # e.g. an EXPLAIN, already formatted
    data: dict = field(default_factory=dict)  # raw figures for tests and later analysis
    figure: str = ""  # a picture of data (bench/figures.py), as a link relative to the report
    load: tuple[float, ...] | None = None  # os.getloadavg() as the benchmark started
    date: str = ""  # when it started (UTC), as machine.describe() writes dates

    @property
    def verdict(self) -> str:
        return "n/a" if self.met is None else verdict(self.met)


def table(headers: list[str], rows: list[list[str]]) -> str:
    """A Markdown table, which also reads well on a terminal."""
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]
    line = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    out = [line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(r) for r in rows]
    return "\n".join(out)


def vacuum_analyze(dsn: str, *tables: str) -> None:
    with conn(dsn) as c:
        for t in tables or (
            "scrinalia.archive_worker_runs",
            "scrinalia.archive_worker_schedules",
            "scrinalia.archive_workers",
            # (the metrics' deltas of a seeding, folded: left dead, their pages are read
            # whole by every fold until autovacuum manages to cut the file short)
            "scrinalia.run_tally_delta",
        ):
            c.execute(f"VACUUM ANALYZE {t}")
