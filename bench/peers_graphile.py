"""graphile-worker (Node), a peer of benchmark 5: installed from bench/node's committed
package.json and package-lock.json with `npm ci` into bench/node/node_modules
(git-ignored), run as N_WORKERS `node bench/node/worker.mjs` processes, each in a
session of its own so that stopping one ends everything it started.

Configurations: "tuned" is graphile-worker's Performance page (concurrentJobs 24,
maxPoolSize 25, localQueue.size 500, completeJobBatchDelay 0, failJobBatchDelay 0)
with NO_LOG_SUCCESS=1 as its perfTest runs;
"defaults" sets nothing (concurrentJobs 1, maxPoolSize 10, no local queue, no
batched completion). Jobs are created through its public SQL API,
graphile_worker.add_jobs(), in one call; a finished job is deleted, so the queue
table empty means all are done, and each process reports how many it ran.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from urllib.parse import quote, urlencode

import psycopg

from scrinalia_workers.testkit.procs import Procs

from .common import check, conn, vacuum_analyze
from .peers import N_WORKERS

NODE_DIR = Path(__file__).resolve().parent / "node"
PACKAGE = NODE_DIR / "node_modules" / "graphile-worker" / "package.json"
CONFIGS = ("tuned", "defaults")
TUNED_SETTINGS = (
    "concurrentJobs 24, maxPoolSize 25, localQueue.size 500, completeJobBatchDelay 0, failJobBatchDelay 0, "
    "NO_LOG_SUCCESS=1"
)
DEFAULT_SETTINGS = "concurrentJobs 1, maxPoolSize 10, no local queue, completion unbatched, a log line per job"
# Is a job left? Through its primary key, as ours reads its partial index: a sequential
# scan would walk every page of deleted jobs at each 10 ms poll (thousands of pages at
# 100,000 jobs), taking CPU from the workers it times.
LIVE = "SELECT EXISTS (SELECT FROM graphile_worker._private_jobs ORDER BY id LIMIT 1)"
DONE = "SELECT NOT EXISTS (SELECT FROM graphile_worker._private_jobs ORDER BY id LIMIT 1)"
# each process's LISTEN client has sent its LISTEN (one session per process)
LISTENING = (
    "SELECT count(DISTINCT application_name) FROM pg_stat_activity WHERE application_name LIKE 'bench-graphile-%'"
    " AND state = 'idle' AND query LIKE 'LISTEN \"jobs:insert\"%'"
)
# graphile-worker's own benchmark (its perfTest, the source of its Performance page's
# figures) runs with NO_LOG_SUCCESS=1: no log line per completed job. "tuned" does too;
# "defaults" logs each job, as graphile-worker does out of the box.
TUNED_ENV = {"NO_LOG_SUCCESS": "1"}
FILL = (
    "SELECT count(*) FROM graphile_worker.add_jobs(ARRAY(SELECT json_populate_record("
    'NULL::graphile_worker.job_spec, \'{"identifier": "noop"}\') FROM generate_series(1, %s)))'
)


def ensure_installed() -> tuple[str | None, str]:
    """(graphile-worker's version, "") once `npm ci` has installed it; (None, why) where
    node or npm is missing or the install fails."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        return None, "graphile-worker skipped: node/npm are not installed."
    lock = NODE_DIR / "package-lock.json"
    if not PACKAGE.exists() or PACKAGE.stat().st_mtime < lock.stat().st_mtime:
        r = subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=NODE_DIR,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if r.returncode != 0 or not PACKAGE.exists():
            last = (r.stderr.strip().splitlines() or ["no output"])[-1]
            return None, f"graphile-worker skipped: npm ci failed in bench/node ({last})."
    return installed_version(), ""


def installed_version() -> str | None:
    """The version in bench/node/node_modules, or None when it is not installed."""
    try:
        return str(json.loads(PACKAGE.read_text())["version"])
    except (OSError, ValueError, KeyError):
        return None


def url(dsn: str, application_name: str) -> str:
    """A libpq keyword DSN as the postgres:// URL node-postgres reads."""
    p = psycopg.conninfo.conninfo_to_dict(dsn)
    host, params = str(p.get("host") or "localhost"), {"application_name": application_name}
    if host.startswith("/"):
        params["host"], host = host, ""
    auth = quote(str(p.get("user") or ""), safe="")
    if p.get("password"):
        auth += ":" + quote(str(p["password"]), safe="")
    port = f":{p['port']}" if p.get("port") else ""
    return (
        f"postgres://{auth + '@' if auth else ''}{host}{port}/{quote(str(p.get('dbname') or ''))}?{urlencode(params)}"
    )


def _node(dsn: str, name: str) -> dict[str, str]:
    return {"DATABASE_URL": url(dsn, name)}


def install(dsn: str) -> None:
    """graphile-worker's schema (its own migrations)."""
    r = subprocess.run(
        ["node", str(NODE_DIR / "worker.mjs"), "install"],
        cwd=NODE_DIR,
        env={**os.environ, **_node(dsn, "bench-graphile-install")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    check(r.returncode == 0, f"graphile-worker: its migrations failed: {r.stderr.strip()[-300:]}")


def fill(c: psycopg.Connection, n: int) -> None:
    """n "noop" jobs through graphile_worker.add_jobs(), one call and one commit."""
    got = c.execute(FILL, (n,)).fetchone()[0]
    check(got == n, f"graphile-worker: add_jobs returned {got} jobs, expected {n}")


def prepare(dsn: str) -> None:
    with conn(dsn) as c:
        c.execute("TRUNCATE graphile_worker._private_jobs")
    vacuum_analyze(dsn, "graphile_worker._private_jobs")


def start(procs: Procs, dsn: str, config: str, logdir: Path) -> list[Path]:
    """N_WORKERS worker processes in `config`; returns their log files. Each prints
    "ready" once run() has returned, its LISTEN client is connected and its first
    (empty) fetch of jobs has returned."""
    logs = []
    for i in range(N_WORKERS):
        log = logdir / f"graphile-{config}-{i}.log"
        procs.start(
            ["node", str(NODE_DIR / "worker.mjs"), config],
            env={**_node(dsn, f"bench-graphile-{i}"), **(TUNED_ENV if config == "tuned" else {})},
            log=log,
            group=True,
        )
        logs.append(log)
    return logs


def ready(logs: list[Path]) -> bool:
    return all(p.exists() and "ready" in p.read_text().splitlines() for p in logs)


def done_counts(logs: list[Path]) -> list[int]:
    """What each stopped process says it ran (its last {"done": N} line)."""
    out = []
    for p in logs:
        lines = [ln for ln in p.read_text().splitlines() if ln.startswith('{"done":')]
        out.append(json.loads(lines[-1])["done"] if lines else -1)
    return out
