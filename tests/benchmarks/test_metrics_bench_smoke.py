"""The metrics benchmark's quick mode runs, and its own checks of the answers hold (and
do fail on a wrong answer)."""

from __future__ import annotations

import sys
from pathlib import Path

import psycopg
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import metrics_bench  # noqa: E402
from bench.common import InvariantError  # noqa: E402


def test_quick_metrics_measures_every_query_at_both_sizes(fresh_dbs):
    r = metrics_bench.run(fresh_dbs, quick=True)
    names = set(metrics_bench.exporter_queries()) | set(metrics_bench.OTHERS)
    assert {"scrinalia_scheduler", "scrinalia_worker", "scrinalia_ledger"} <= names
    assert len(r.rows) == 2 * len(names)
    for n_workers, d in r.data.items():
        assert set(d["figures"]) == names
        assert d["owed"] > 0
        for f in d["figures"].values():
            assert len(f["times"]) >= 5 and min(f["times"]) > 0
            assert len(f["server"]) == len(f["times"]) and min(f["server"]) > 0
        assert d["figures"]["scrinalia_worker"]["rows"] == n_workers


def test_the_check_fails_on_a_wrong_answer(fresh_dbs):
    dsn = fresh_dbs("bench_metrics_check")
    prep = metrics_bench.prepare(dsn, 100, 1_000)
    figures = metrics_bench.measure(dsn, {**metrics_bench.exporter_queries(), **metrics_bench.OTHERS}, 1)
    metrics_bench.verify(dsn, 100, prep["owed"], figures)
    with pytest.raises(InvariantError, match="worker_metrics"):
        metrics_bench.verify(dsn, 101, prep["owed"], figures)
    with psycopg.connect(dsn, autocommit=True) as c:  # a period reported finished while open
        c.execute("UPDATE scrinalia.archive_worker_runs SET retry_pending = false WHERE retry_pending")
    with pytest.raises(InvariantError, match="still-open"):
        metrics_bench.verify(dsn, 100, prep["owed"], figures)


def test_each_schedule_points_at_its_last_run_as_the_tick_leaves_it(fresh_dbs):
    """A scrape reads each schedule's last run (its lateness): a catalogue whose seeded
    history left every last_run_id NULL measured the metrics without that read."""
    dsn = fresh_dbs("bench_metrics_last_runs")
    metrics_bench.prepare(dsn, 100, 1_000)
    with psycopg.connect(dsn, autocommit=True) as c:
        rows = c.execute(
            """SELECT r.worker_name = s.worker_name AND r.attempt = 1 AND r.scheduled_for IS NOT NULL
                      AND NOT EXISTS (SELECT FROM scrinalia.archive_worker_runs n
                                       WHERE n.worker_name = s.worker_name AND n.attempt = 1
                                         AND n.scheduled_for IS NOT NULL AND n.run_id > r.run_id)
                 FROM scrinalia.archive_worker_schedules s
                 LEFT JOIN scrinalia.archive_worker_runs r ON r.run_id = s.last_run_id"""
        ).fetchall()
    assert len(rows) == 100 and all(ok for (ok,) in rows)
