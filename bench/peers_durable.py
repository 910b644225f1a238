"""The durable-cluster figures of benchmark 5: the same drains with fsync,
synchronous_commit and full_page_writes on (ALTER SYSTEM and a reload, our own
throwaway cluster only), for ours, pgqueuer on asyncpg and graphile-worker tuned,
and pgbench's one-row INSERT transactions per second as the reference line."""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

from . import drain_bench
from .claim_bench import set_durability
from .common import conn

SYSTEMS = ("ours", "pgqueuer, asyncpg", "graphile-worker, tuned")
PGBENCH_CLIENTS = 4


def pgbench_insert_tps(dsn: str, seconds: int) -> float | None:
    """pgbench -c 4 -j 2 of `INSERT INTO bench_pgbench_one DEFAULT VALUES`, one row a
    transaction; None where pgbench is not found."""
    from scrinalia_workers.testkit import cluster

    bin_dir = cluster.find_bin_dir()
    exe = Path(bin_dir) / "pgbench" if bin_dir else None
    if exe is None or not exe.exists():
        return None
    with conn(dsn) as c:
        c.execute("DROP TABLE IF EXISTS bench_pgbench_one")
        c.execute("CREATE TABLE bench_pgbench_one (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v int)")
    with tempfile.NamedTemporaryFile("w", suffix=".sql") as script:
        script.write("INSERT INTO bench_pgbench_one (v) VALUES (1);\n")
        script.flush()
        r = subprocess.run(
            [str(exe), "-n", "-c", str(PGBENCH_CLIENTS), "-j", "2", "-T", str(seconds), "-f", script.name, dsn],
            capture_output=True,
            text=True,
            timeout=seconds + 120,
        )
    m = re.search(r"tps = ([0-9.]+)", r.stdout)
    return float(m.group(1)) if r.returncode == 0 and m else None


def run(admin_dsn: str, dsns: dict[str, str], n: int, rounds: int, versions: dict, pgbench_seconds: int) -> dict:
    """{"drains": drain_bench.run()'s figures for SYSTEMS, "pgbench": tps or None,
    "settings": the three settings as the server showed them}."""
    settings = set_durability(admin_dsn, True)
    try:
        drains = drain_bench.run(dsns, n, rounds, versions, only=list(SYSTEMS))
        tps = pgbench_insert_tps(dsns["ours"], pgbench_seconds)
    finally:
        set_durability(admin_dsn, False)
    return {"drains": drains, "pgbench": tps, "settings": settings}
