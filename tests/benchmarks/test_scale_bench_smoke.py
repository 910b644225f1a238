"""The scale benchmark's quick mode measures every figure on both ledgers, and its own
checks of the prune hold (and do fail on a prune that leaves old runs behind)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import psycopg
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import metrics_bench, scale_bench, scale_prune  # noqa: E402
from bench.common import InvariantError  # noqa: E402


@pytest.mark.slow
def test_quick_scale_measures_every_figure_on_both_ledgers(fresh_dbs):
    s = scale_bench.QUICK
    r = scale_bench.run(fresh_dbs, quick=True)
    rates = r.data["rates"]
    assert set(rates) == set(scale_bench.MEASURES)
    for by_ledger in rates.values():
        assert set(by_ledger) == set(scale_bench.LEDGERS)
        assert all(len(v) == s.rounds and min(v) > 0 for v in by_ledger.values())
    queries = r.data["queries"]
    assert set(queries) == set(metrics_bench.exporter_queries())
    assert all(len(f["times"]) == s.query_reps and min(f["times"]) > 0 for f in queries.values())
    p = r.data["prune"]
    assert p["removed"] == s.pruned and p["rate"] > 0
    for name in ("claims", "ticks"):
        during = p["loops"][name]["during"]
        assert during["count"] > 0 and during["worst"] >= during["p99"] > 0, f"the {name} loop timed nothing"
    assert p["finished"] > 0 and p["decided"] > 0
    size = r.data["sizes"]
    assert size["runs"] >= s.history
    assert size["heap"] > 0 and size["indexes"] > 0 and size["total"] >= size["heap"] + size["indexes"]
    assert len(size["indexes_each"]) > 1


@pytest.mark.slow
def test_a_prune_leaving_old_runs_fails_the_benchmark(fresh_dbs):
    s = dataclasses.replace(scale_bench.QUICK, workers=100, history=1_000, pruned=500)
    dsn = fresh_dbs("bench_scale_check")
    scale_bench.build_catalogue(dsn, s)
    history = scale_bench.add_history(dsn, s)
    with psycopg.connect(dsn, autocommit=True) as c:  # an old run still owed its retry: kept
        c.execute(
            "UPDATE scrinalia.archive_worker_runs SET retry_pending = true WHERE run_id = %s", (history["first"] + 1,)
        )
    scale_bench.none_due(dsn, history["upto"])
    with pytest.raises(InvariantError, match="prune_runs removed"):
        scale_prune.prune(dsn, s.workers, s.pruned, history["first"])
