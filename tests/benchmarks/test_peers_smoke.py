"""Benchmark 5's drains at smoke sizes: ours through the public enqueue API, each
peer in each configuration the benchmark runs, and no worker process left behind by
an interrupted run. graphile-worker needs bench/node/node_modules (`npm ci`, which
`python -m bench --only compare` runs): without it those tests are skipped, saying so.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psycopg
import pytest

from scrinalia_workers.testkit.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench import drain_bench, peers, peers_drain, peers_graphile  # noqa: E402

pytestmark = pytest.mark.slow

needs_graphile = pytest.mark.skipif(
    peers_graphile.installed_version() is None,
    reason="graphile-worker is not installed in bench/node/node_modules (npm ci there, or run the compare benchmark)",
)


def test_ours_drain_creates_its_runs_through_the_enqueue_api(db_dsn, tmp_path):
    r = drain_bench.runner_drain(db_dsn, 200, None, tmp_path)
    assert r["rate"] > 0 and r["enqueue"] > 0
    with psycopg.connect(db_dsn) as c:
        got = c.execute(
            "SELECT count(*) FILTER (WHERE trigger = 'MANUAL' AND requested_by = 'bench' AND config IS NOT NULL),"
            " count(*) FROM scrinalia.archive_worker_runs"
        ).fetchone()
    assert got == (200, 200)


def test_pgqueuer_drains_in_every_configuration(empty_db_dsn):
    v = peers.versions()
    assert "asyncpg" in peers.pgqueuer_configs(v), "the bench extra installs asyncpg"
    peers.pgqueuer_install(empty_db_dsn)
    for config in peers.pgqueuer_configs(v):
        r = peers_drain.pgqueuer_drain(empty_db_dsn, 200, config)  # checks each job done once
        assert r["rate"] > 0 and r["enqueue"] > 0, config


def test_procrastinate_drains_tuned(empty_db_dsn):
    peers.procrastinate_install(empty_db_dsn)
    r = peers_drain.procrastinate_drain(empty_db_dsn, 100, "tuned")
    assert r["rate"] > 0 and r["enqueue"] > 0


@needs_graphile
def test_graphile_worker_drains_every_job_once(empty_db_dsn, tmp_path):
    peers_graphile.install(empty_db_dsn)
    for config in peers_graphile.CONFIGS:
        # the drain checks that its four processes ran exactly n jobs between them
        r = peers_drain.graphile_drain(empty_db_dsn, 300, config, tmp_path)
        assert r["rate"] > 0 and r["enqueue"] > 0, config


def test_graphile_url_keeps_every_part_of_the_dsn():
    url = peers_graphile.url("host=127.0.0.1 port=5433 user=u password=p@ss dbname=d", "bench-graphile-0")
    assert url == "postgres://u:p%40ss@127.0.0.1:5433/d?application_name=bench-graphile-0"
    url = peers_graphile.url("host=/tmp/sock dbname=d", "x")
    assert url == "postgres:///d?application_name=x&host=%2Ftmp%2Fsock"


def _node_workers(dbname: str) -> list[int]:
    """The pids of bench/node/worker.mjs processes connected to dbname."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if "worker.mjs" in (d / "cmdline").read_text() and f"/{dbname}?" in (d / "environ").read_text():
                out.append(int(d.name))
        except OSError:
            continue
    return out


@needs_graphile
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_an_interrupted_drain_leaves_no_worker_process(empty_db_dsn, tmp_path, sig):
    """The benchmark's process is stopped mid-drain: its graphile-worker processes,
    in sessions of their own, are ended with it."""
    dbname = psycopg.conninfo.conninfo_to_dict(empty_db_dsn)["dbname"]
    peers_graphile.install(empty_db_dsn)
    script = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        sys.path.insert(0, {str(ROOT)!r})
        from bench import drain_timing, peers_drain
        with drain_timing.sigterm_interrupts():
            peers_drain.graphile_drain({empty_db_dsn!r}, 50_000, "defaults", Path({str(tmp_path)!r}))
        """
    )
    p = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE, text=True)
    try:
        with psycopg.connect(empty_db_dsn, autocommit=True) as c:
            wait_for(  # the jobs are being drained
                lambda: 0 < c.execute("SELECT count(*) FROM graphile_worker._private_jobs").fetchone()[0] < 50_000,
                timeout=60,
                what="the drain under way",
            )
        pids = _node_workers(dbname)
        assert len(pids) == 4, pids
        p.send_signal(sig)
        assert p.wait(timeout=60) != 0
        wait_for(lambda: not any(os.path.exists(f"/proc/{pid}") for pid in pids), timeout=30, what="node ended")
        assert _node_workers(dbname) == []
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
