"""The enqueue benchmark's quick mode runs, and its own checks (every form writes the
runs one enqueue() per worker writes) pass."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import enqueue_bench  # noqa: E402
from bench.common import InvariantError  # noqa: E402


def test_quick_enqueue_bench_measures_every_form_in_every_round(db_dsn):
    r = enqueue_bench.run(db_dsn, quick=True)
    rates = r.data["rates"]
    assert len(rates) == 8
    assert all(len(v) == r.data["rounds"] and min(v) > 0 for v in rates.values())
    assert len(r.rows) == 4 and r.met is None


def test_a_form_writing_other_runs_fails_the_benchmark(db_dsn, monkeypatch):
    with enqueue_bench.conn(db_dsn) as c:
        enqueue_bench.seed.workers(c, 30)
    real = enqueue_bench.bulk_floor

    def floor_with_another_config(c, n, reference):
        row = reference[0]
        return real(c, n, [(row[0], row[1], {"changed": True}, row[3], row[4])] + reference[1:])

    monkeypatch.setattr(enqueue_bench, "bulk_floor", floor_with_another_config)
    try:
        enqueue_bench.measure(db_dsn, 20, [30], 1)
    except InvariantError as e:
        assert "other runs than enqueue() writes" in str(e)
    else:
        raise AssertionError("a floor writing another config passed the benchmark's check")
