"""The peers' drains, timed as bench/drain_bench.py times ours: N_WORKERS worker
processes started, connected and idle; N no-op jobs made visible by one commit of the
system's own enqueue API (that call timed too); then the time until the database says
all N are done. Each returns Drained.figures() (bench/drain_timing.py: the rate, the
seconds, the enqueue call's seconds, the WAL and checkpoints meanwhile)."""

from __future__ import annotations

import asyncio
import multiprocessing
from pathlib import Path

from scrinalia_workers.testkit.procs import Procs
from scrinalia_workers.testkit.waiting import wait_for

from . import peers, peers_graphile
from .common import check, conn, now, vacuum_analyze
from .drain_timing import await_sessions, timed_drain
from .peers import N_WORKERS

PROCRASTINATE_LIVE = "SELECT EXISTS (SELECT FROM procrastinate_jobs WHERE status IN ('todo', 'doing'))"
PGQUEUER_LIVE = "SELECT EXISTS (SELECT FROM pgqueuer)"


def _with_processes(target, dsn: str, what: str, app_name: str, body, config: str):
    """Starts N_WORKERS processes of target(dsn, i, ready, config), waits until each is
    ready and the system's sessions (application_name LIKE app_name) are connected and
    idle, runs body(alive) and ends them (killed: they hold nothing of ours)."""
    ctx = multiprocessing.get_context("fork")
    readies = [ctx.Event() for _ in range(N_WORKERS)]
    procs = [ctx.Process(target=target, args=(dsn, i, readies[i], config), daemon=True) for i in range(N_WORKERS)]
    for p in procs:
        p.start()
    try:
        for r in readies:
            check(r.wait(60), f"{what}: a worker did not start")
        await_sessions(
            dsn,
            f"SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE '{app_name}' AND state = 'idle'",
            N_WORKERS,
            what,
        )  # and settled: their first (empty) dequeue done, they wait for a notification
        return body(lambda: all(p.is_alive() for p in procs))
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
            p.join(timeout=30)


# --- pgqueuer ---------------------------------------------------------------------


def pgqueuer_drain(dsn: str, n: int, config: str) -> dict:
    """4 continuous-mode pgqueuer workers in peers.PGQUEUER[config]; the jobs enqueued
    with one list enqueue() on the same driver."""
    with conn(dsn) as c:
        c.execute("TRUNCATE pgqueuer, pgqueuer_log RESTART IDENTITY")
    vacuum_analyze(dsn, "pgqueuer", "pgqueuer_log")
    driver = peers.PGQUEUER[config][0]
    done_sql = f"SELECT count(*) = {int(n)} FROM pgqueuer_log WHERE status = 'successful'"
    d = _with_processes(
        peers.pgqueuer_worker,
        dsn,
        f"pgqueuer {config}",
        "bench-pgq-%",
        lambda alive: timed_drain(dsn, lambda c: peers.pgqueuer_fill(dsn, n, driver), PGQUEUER_LIVE, done_sql, alive),
        config,
    )
    with conn(dsn) as c:
        done, distinct = c.execute(
            "SELECT count(*), count(DISTINCT job_id) FROM pgqueuer_log WHERE status = 'successful'"
        ).fetchone()
    check(done == n == distinct, f"pgqueuer: {done} successes for {distinct} jobs, expected {n}")
    return d.figures(n)


# --- procrastinate ----------------------------------------------------------------


def procrastinate_drain(dsn: str, n: int, config: str) -> dict:
    app, noop = peers.procrastinate_app(dsn, "bench-procrastinate-fill")

    def fill(c) -> float:
        took = []

        async def go():
            async with app.open_async():
                t0 = now()
                await noop.batch_defer_async(*({} for _ in range(n)))  # one call
                took.append(now() - t0)

        asyncio.run(go())
        return took[0]

    with conn(dsn) as c:
        c.execute("TRUNCATE procrastinate_jobs, procrastinate_events RESTART IDENTITY CASCADE")
    vacuum_analyze(dsn, "procrastinate_jobs", "procrastinate_events")
    done_sql = f"SELECT count(*) = {int(n)} FROM procrastinate_jobs WHERE status = 'succeeded'"
    d = _with_processes(
        peers.procrastinate_worker,
        dsn,
        f"procrastinate {config}",
        "bench-procrastinate",
        lambda alive: timed_drain(dsn, fill, PROCRASTINATE_LIVE, done_sql, alive),
        config,
    )
    with conn(dsn) as c:
        twice = c.execute(
            "SELECT count(*) FROM (SELECT job_id FROM procrastinate_events WHERE type = 'started' "
            "GROUP BY job_id HAVING count(*) > 1) x"
        ).fetchone()[0]
    check(twice == 0, f"procrastinate: {twice} jobs started twice")
    return d.figures(n)


# --- graphile-worker --------------------------------------------------------------


def graphile_drain(dsn: str, n: int, config: str, logdir: Path) -> dict:
    """4 `node bench/node/worker.mjs <config>` processes; the jobs through one
    graphile_worker.add_jobs() call."""
    peers_graphile.prepare(dsn)
    with Procs() as procs:
        logs = peers_graphile.start(procs, dsn, config, logdir)
        wait_for(
            lambda: peers_graphile.ready(logs),
            timeout=60,
            what="graphile-worker: its workers ready",
            watch=procs.started,
        )
        # "ready" comes after graphile-worker's listen-success event, which it emits
        # before its LISTEN statement has run: each process's LISTEN session must be
        # idle in pg_stat_activity, or a process could miss the jobs' notification and
        # sleep until its next poll while the others drain its share
        await_sessions(dsn, peers_graphile.LISTENING, N_WORKERS, "graphile-worker", watch=procs.started)
        d = timed_drain(
            dsn,
            lambda c: peers_graphile.fill(c, n),
            peers_graphile.LIVE,
            peers_graphile.DONE,
            lambda: all(p.running() for p in procs.started),
        )
        codes = procs.stop_all(timeout=30)
    check(all(c == 0 for c in codes), f"graphile-worker: exit codes {codes}")
    counts = peers_graphile.done_counts(logs)
    check(sum(counts) == n, f"graphile-worker: its processes ran {counts} jobs, expected {n} in all")
    return d.figures(n)
