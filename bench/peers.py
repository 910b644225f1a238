"""The systems we compare with, procrastinate and pgqueuer, driven through their own
public APIs over psycopg 3: their versions, schema set-up, apps and worker processes,
written once for the enqueue figures (compare_bench) and the drains (drain_bench).

procrastinate: App(PsycopgConnector), @app.task, defer_async / batch_defer_async,
run_worker_async. pgqueuer: Queries over a PsycopgDriver, enqueue with scalars /
lists, QueueManager.run() in continuous or drain mode.

Also here: pgqueuer's drain-mode harness (the jobs queued before its workers start,
timed from their start barrier), its best figure, which needs no timer of ours.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing

import psycopg

from .common import check, conn, now, vacuum_analyze

N_WORKERS = 4  # worker processes per system in the drains
BATCH = 1_000  # jobs per batch enqueue


def versions() -> dict[str, str | None]:
    """The installed version of each peer (and psycopg); None where one is missing."""
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for name in ("procrastinate", "pgqueuer", "psycopg"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


# --- procrastinate --------------------------------------------------------------


def procrastinate_app(dsn: str, name: str | None = None):
    """An App with one empty task, "noop"; name: its sessions' application_name."""
    import procrastinate

    conninfo = dsn if name is None else psycopg.conninfo.make_conninfo(dsn, application_name=name)
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=conninfo))

    @app.task(name="noop")
    async def noop() -> None:
        return None

    return app, noop


def procrastinate_install(dsn: str) -> None:
    with conn(dsn) as c:
        if c.execute("SELECT to_regclass('procrastinate_jobs') IS NOT NULL").fetchone()[0]:
            return
    app, _ = procrastinate_app(dsn)

    async def install():
        async with app.open_async():
            await app.schema_manager.apply_schema_async()

    asyncio.run(install())


def procrastinate_worker(dsn: str, i: int, ready) -> None:
    """A worker process (multiprocessing target): ready is set once it is connected."""
    logging.disable(logging.CRITICAL)
    app, _ = procrastinate_app(dsn, "bench-procrastinate")

    async def main():
        async with app.open_async():
            ready.set()
            await app.run_worker_async(concurrency=1, name=f"bench-{i}", install_signal_handlers=False)

    asyncio.run(main())


# --- pgqueuer -------------------------------------------------------------------


async def pgqueuer_queries(dsn: str, name: str | None = None):
    """(an autocommit async connection, pgqueuer's Queries over it); name: its application_name."""
    from pgqueuer import PsycopgDriver, Queries

    kw = {} if name is None else {"application_name": name}
    aconn = await psycopg.AsyncConnection.connect(dsn, autocommit=True, **kw)
    return aconn, Queries(PsycopgDriver(aconn))


def pgqueuer_install(dsn: str) -> None:
    async def install():
        aconn, q = await pgqueuer_queries(dsn)
        async with aconn:
            if not await q.schema_is_installed():
                await q.install()

    asyncio.run(install())


def pgqueuer_fill(dsn: str, n: int, batch: int | None = None) -> None:
    """n "noop" jobs, in one statement (one commit) or in batches of `batch`."""
    step = batch or n

    async def fill():
        aconn, q = await pgqueuer_queries(dsn)
        async with aconn:
            for i in range(0, n, step):
                m = min(step, n - i)
                await q.enqueue(["noop"] * m, [None] * m, [0] * m)

    asyncio.run(fill())


def _pgqueuer_run(dsn: str, name: str | None, before_run, mode=None) -> None:
    logging.disable(logging.CRITICAL)
    from pgqueuer import QueueManager

    async def main():
        aconn, q = await pgqueuer_queries(dsn, name)
        async with aconn:
            qm = QueueManager(q)

            @qm.entrypoint("noop")
            async def noop(job) -> None:
                return None

            before_run()
            await (qm.run() if mode is None else qm.run(mode=mode))

    asyncio.run(main())


def pgqueuer_worker(dsn: str, i: int, ready) -> None:
    """A continuous-mode worker process (multiprocessing target); ready is set once connected."""
    _pgqueuer_run(dsn, f"bench-pgq-{i}", ready.set)


def _pgqueuer_drain_worker(dsn: str, i: int, start) -> None:
    from pgqueuer.domain.types import QueueExecutionMode

    _pgqueuer_run(dsn, None, start.wait, QueueExecutionMode.drain)


def pgqueuer_drain_mode(dsn: str, n: int) -> dict:
    """pgqueuer's best case: n jobs queued first, then N_WORKERS processes of
    QueueManager.run(mode=drain) released together from a barrier and timed until
    the database says all n are done (polled every 10 ms), their start-up counted."""
    with conn(dsn) as c:
        c.execute("TRUNCATE pgqueuer, pgqueuer_log RESTART IDENTITY")
    pgqueuer_fill(dsn, n, BATCH)
    vacuum_analyze(dsn, "pgqueuer", "pgqueuer_log")
    done_sql = (
        "SELECT NOT EXISTS (SELECT FROM pgqueuer)"
        f" AND (SELECT count(*) FROM pgqueuer_log WHERE status = 'successful') = {int(n)}"
    )
    ctx = multiprocessing.get_context("fork")
    start = ctx.Barrier(N_WORKERS + 1)
    procs = [ctx.Process(target=_pgqueuer_drain_worker, args=(dsn, i, start)) for i in range(N_WORKERS)]
    for p in procs:
        p.start()
    with conn(dsn) as c:
        c.execute(done_sql)
        start.wait(timeout=60)
        t0 = now()
        deadline = t0 + 600
        while not c.execute(done_sql).fetchone()[0]:
            check(now() < deadline, "the jobs were not done within 10 minutes")
            check(any(p.is_alive() for p in procs), "every worker process exited before the jobs were done")
            c.execute("SELECT pg_sleep(0.01)")
        elapsed = now() - t0
    for p in procs:
        p.join(timeout=120)
        if p.is_alive():
            p.terminate()
    bad = [p.exitcode for p in procs if p.exitcode != 0]
    check(not bad, f"worker processes exited with {bad}")
    with conn(dsn) as c:
        left = c.execute("SELECT count(*) FROM pgqueuer").fetchone()[0]
        done, distinct = c.execute(
            "SELECT count(*), count(DISTINCT job_id) FROM pgqueuer_log WHERE status = 'successful'"
        ).fetchone()
        span = c.execute("SELECT extract(epoch FROM max(created) - min(created)) FROM pgqueuer_log").fetchone()[0]
    check(left == 0, f"pgqueuer: {left} jobs left in the queue")
    check(done == n == distinct, f"pgqueuer: {done} successes for {distinct} jobs, expected {n}")
    return {"rate": n / elapsed, "ledger_rate": n / float(span) if span else None}
