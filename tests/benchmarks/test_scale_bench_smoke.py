"""The scale benchmark's quick mode measures every figure on both ledgers, and its own
checks of the prune hold (and do fail on a prune that leaves old runs behind)."""

from __future__ import annotations

import dataclasses
import sys
import threading
from pathlib import Path

import psycopg
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import metrics_bench, scale_bench, scale_prune  # noqa: E402
from bench.common import InvariantError, now  # noqa: E402
from scrinalia_workers.testkit.waiting import wait_for  # noqa: E402


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
    for name in ("claims", "ticks"):  # (each loop sampled: alone for 3 s, its statements back to back)
        waits = p["loops"][name]["waits_alone"]
        assert waits["looks"] > 0 and waits["samples"] > 0 and sum(waits["kinds"].values()) == waits["samples"]
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


class _Loop:
    def __init__(self, name: str):
        self.name = name


def test_the_wait_sampler_tells_a_lock_wait_from_the_cpu(fresh_dbs):
    """A loop's statement blocked by another session's row lock shows as Lock, for as
    long as it is held; the lock released, the statement ends and no longer shows."""
    dsn = fresh_dbs("bench_waits")
    with psycopg.connect(dsn, autocommit=True) as setup:
        setup.execute("CREATE TABLE held (id integer PRIMARY KEY)")
        setup.execute("INSERT INTO held VALUES (1)")
    sampler = scale_prune.WaitSampler(dsn, [_Loop("ticks")])
    with (
        psycopg.connect(dsn) as holder,
        psycopg.connect(dsn, autocommit=True, application_name=scale_prune.session_name("ticks")) as waiter,
    ):
        holder.execute("SELECT id FROM held FOR UPDATE")
        blocked = threading.Thread(target=lambda: waiter.execute("UPDATE held SET id = 1"))
        start = now()
        sampler.start()
        blocked.start()
        try:
            waits = wait_for(
                lambda: (w := sampler.window("ticks", start, now()))["longest_lock"] >= 0.1 and w,
                what="the sampler to see the update waiting on the row lock for 100 ms",
            )
            holder.rollback()
            blocked.join(timeout=10)
            done = now()
            wait_for(lambda: sum(t > done for t in sampler.looks) >= 3, what="three looks after the update ended")
        finally:
            holder.rollback()
            sampler.stop.set()
            sampler.join(timeout=10)
    assert sampler.error is None and not blocked.is_alive()
    assert set(waits["kinds"]) == {"Lock:transactionid"}
    after = sampler.window("ticks", done, now())
    assert after["looks"] >= 3 and after["samples"] == 0 and after["longest_lock"] == 0
