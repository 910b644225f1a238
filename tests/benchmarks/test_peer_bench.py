"""The harness that holds the runner against graphile-worker at its best: graphile-worker
tuned without its line per job, each of its processes listening before the jobs
commit, a poll that reads an index, each drain started on a quiet machine (or marked),
the load recorded; and BENCHMARKS.md marking a section measured on a loaded machine."""

from __future__ import annotations

import sys
from pathlib import Path

import psycopg
import pytest

from scrinalia_workers.testkit.procs import Procs
from scrinalia_workers.testkit.waiting import wait_for

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import machine, peer_bench, peers_drain, peers_graphile, report  # noqa: E402
from bench.common import Result  # noqa: E402
from bench.drain_timing import await_sessions  # noqa: E402

needs_graphile = pytest.mark.skipif(
    peers_graphile.installed_version() is None,
    reason="graphile-worker is not installed in bench/node/node_modules (npm ci there, or run the compare benchmark)",
)

MACHINE = {
    "date": "2026-12-05 10:00 UTC",
    "cores": 2,
    "cpu": "cpu",
    "server": "PostgreSQL 15.18 on x86_64",
    "settings": {"fsync": "off", "synchronous_commit": "off"},
    "load": (0.2, 0.2, 0.2),
}


def _result(load):
    return Result(
        key="tick", title="1. Tick", setup=["s"], headers=["h"], rows=[["1"]], target="t", met=True, load=load
    )


def test_a_section_started_above_the_load_threshold_is_marked_and_its_summary_says_so():
    loaded = report.section(_result((3.36, 2.76, 1.68)), MACHINE)
    assert "load average 3.36 / 2.76 / 1.68 (1 / 5 / 15 min) at the start of this section" in loaded
    assert "**Measured on a loaded machine**" in loaded
    assert "| met (load 3.36) -->" in loaded
    quiet = report.section(_result((0.42, 0.5, 0.6)), MACHINE)
    assert "load average 0.42" in quiet and "loaded machine" not in quiet and "| met -->" in quiet


@needs_graphile
def test_tuned_graphile_worker_writes_no_line_per_job_and_defaults_does(empty_db_dsn, tmp_path):
    peers_graphile.install(empty_db_dsn)
    for config in peers_graphile.CONFIGS:
        peers_drain.graphile_drain(empty_db_dsn, 200, config, tmp_path)
    lines = {
        config: sum(p.read_text().count("Completed task") for p in tmp_path.glob(f"graphile-{config}-*.log"))
        for config in peers_graphile.CONFIGS
    }
    assert lines == {"tuned": 0, "defaults": 200}


@needs_graphile
def test_every_graphile_process_has_sent_its_listen_and_fetched_once_when_the_harness_goes(empty_db_dsn, tmp_path):
    peers_graphile.install(empty_db_dsn)
    with Procs() as procs:
        logs = peers_graphile.start(procs, empty_db_dsn, "tuned", tmp_path)
        wait_for(lambda: peers_graphile.ready(logs), timeout=60, what="ready", watch=procs.started)
        await_sessions(empty_db_dsn, peers_graphile.LISTENING, 4, "graphile-worker", watch=procs.started)
        with psycopg.connect(empty_db_dsn, autocommit=True) as c:
            names = c.execute(
                "SELECT array_agg(DISTINCT application_name ORDER BY application_name) FROM pg_stat_activity"
                " WHERE state = 'idle' AND query LIKE 'LISTEN \"jobs:insert\"%'"
            ).fetchone()[0]
        procs.stop_all(timeout=30)
    assert names == [f"bench-graphile-{i}" for i in range(4)]


@needs_graphile
def test_the_graphile_poll_reads_its_primary_key_not_every_deleted_page(empty_db_dsn):
    peers_graphile.install(empty_db_dsn)
    with psycopg.connect(empty_db_dsn, autocommit=True) as c:
        peers_graphile.fill(c, 5_000)
        c.execute("DELETE FROM graphile_worker._private_jobs WHERE id < 4900")
        c.execute("VACUUM ANALYZE graphile_worker._private_jobs")
        for sql in (peers_graphile.LIVE, peers_graphile.DONE):
            plan = "\n".join(r[0] for r in c.execute("EXPLAIN " + sql).fetchall())
            assert "Index" in plan and "Seq Scan" not in plan, plan


@needs_graphile
def test_quick_peer_bench_gives_a_ratio_per_round_and_the_load_of_each_drain(db_dsn, empty_db_dsn):
    r = peer_bench.run(lambda name, migrate=True: db_dsn if migrate else empty_db_dsn, quick=True)
    (f,) = r.data["figures"]
    assert f["n"] == 1_000 and len(f["ratios"]) == 1 and f["ratios"][0] > 0
    for system in ("ours", peer_bench.PEER):
        drain = f["drains"][system]
        assert len(drain["load"]) == 1
        # the WAL of a drain of 1,000 jobs: more than nothing, less than a megabyte a job
        assert len(drain["wal"]) == 1 and 0 < drain["wal"][0] < 1_000 * 1024 * 1024
        assert len(drain["checkpoints"]) == 1 and drain["checkpoints"][0] >= 0
    assert r.rows[0][0] == "1,000" and r.rows[0][4].endswith("x")
    assert " KiB; " in r.rows[0][6]


class _Clock:
    """Time that passes only when the harness sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_a_drain_starts_once_the_load_has_settled_and_not_later_than_the_bound(monkeypatch):
    clock = _Clock()
    loads = iter([3.1, 2.4, 1.9, 1.4, 0.8])
    monkeypatch.setattr(machine, "load", lambda: next(loads))
    assert machine.await_quiet(most=60, poll=2, clock=clock, sleep=clock.sleep) == 1.4
    assert clock.slept == [2, 2, 2]  # it looked again until the load was at most LOADED

    clock = _Clock()
    monkeypatch.setattr(machine, "load", lambda: 4.2)  # another tenant keeps the cores busy
    assert machine.await_quiet(most=60, poll=2, clock=clock, sleep=clock.sleep) == 4.2
    assert clock.now == 60  # given up at the bound: the drain starts, its row marked loaded

    quiet = _Clock()
    monkeypatch.setattr(machine, "load", lambda: 0.3)
    assert machine.await_quiet(clock=quiet, sleep=quiet.sleep) == 0.3 and quiet.slept == []
