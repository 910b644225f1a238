"""Benchmark 5: side by side with procrastinate and pgqueuer on the same PostgreSQL.

Each system gets a database of its own in the same cluster and is driven through
its own public API with an empty task:

- enqueue: N jobs one call at a time from one connection (the API's ordinary path),
  and N jobs in batches where the system has a batch API;
- claim-run-finish: N queued jobs drained by 4 worker processes (one connection,
  or one worker of concurrency 1, each), as many as our runners.

procrastinate: App(PsycopgConnector), @app.task, defer_async / batch_defer_async,
app.run_worker_async(concurrency=1, wait=False). pgqueuer: Queries over a
PsycopgDriver (psycopg 3 for all three systems), enqueue with scalars / lists,
QueueManager.run(mode=drain) with its default batch size.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing

import psycopg

from . import claim_bench, seed
from .common import Result, check, conn, now, vacuum_analyze

N_RUNNERS = 4
BATCH = 1_000


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version
    out = {}
    for name in ("procrastinate", "pgqueuer", "psycopg"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


# --- ours ---------------------------------------------------------------------

ENQUEUE_SQL = "SELECT run_id FROM scrinalia.enqueue(%s, '{}'::jsonb, 'MANUAL', 'bench')"


def ours_enqueue(dsn: str, n: int) -> dict:
    with conn(dsn) as c:
        seed.reset(c)
        seed.workers(c, n)
    vacuum_analyze(dsn)
    names = [seed.worker_name(i) for i in range(n)]
    with conn(dsn) as c:
        c.execute("SELECT 1")
        t0 = now()
        for w in names[: n // 2]:
            c.execute(ENQUEUE_SQL, (w,)).fetchone()
        single = now() - t0
        # the same calls, pipelined (psycopg pipeline mode, one sync per BATCH): we have
        # no batch enqueue, since the queue is one slot per worker
        t0 = now()
        rest = names[n // 2:]
        for i in range(0, len(rest), BATCH):
            with c.pipeline():
                for w in rest[i:i + BATCH]:
                    c.execute(ENQUEUE_SQL, (w,))
        batched = now() - t0
        count = c.execute("SELECT count(*) FROM scrinalia.archive_worker_runs WHERE status = 'QUEUED'").fetchone()[0]
    check(count == n, f"ours: {count} runs enqueued, expected {n}")
    return {"single": (n // 2) / single, "batch": len(rest) / batched}


def ours_drain(dsn: str, n: int) -> dict:
    f = claim_bench.run_once(dsn, n, N_RUNNERS, "processes")
    return {"rate": f["rate"], "ledger_rate": f["n"] / f["db_span"]}


# --- procrastinate --------------------------------------------------------------

def _procrastinate_app(dsn: str):
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))

    @app.task(name="noop")
    async def noop() -> None:
        return None

    return app, noop


async def _procrastinate_enqueue(dsn: str, n: int) -> dict:
    app, noop = _procrastinate_app(dsn)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        await noop.defer_async()  # warm the pool
        t0 = now()
        for _ in range(n // 2):
            await noop.defer_async()
        single = now() - t0
        t0 = now()
        rest = n - n // 2
        for i in range(0, rest, BATCH):
            await noop.batch_defer_async(*({} for _ in range(min(BATCH, rest - i))))
        batched = now() - t0
    return {"single": (n // 2) / single, "batch": rest / batched}


def _procrastinate_worker(dsn: str, name: str, start) -> None:
    logging.disable(logging.CRITICAL)
    app, _ = _procrastinate_app(dsn)

    async def main():
        async with app.open_async():
            start.wait()
            await app.run_worker_async(concurrency=1, wait=False, name=name,
                                       install_signal_handlers=False)

    asyncio.run(main())


def procrastinate_drain(dsn: str, n: int) -> dict:
    app, noop = _procrastinate_app(dsn)

    async def fill():
        async with app.open_async():
            for i in range(0, n, BATCH):
                await noop.batch_defer_async(*({} for _ in range(min(BATCH, n - i))))

    with conn(dsn) as c:
        c.execute("TRUNCATE procrastinate_jobs, procrastinate_events RESTART IDENTITY CASCADE")
    asyncio.run(fill())
    vacuum_analyze(dsn, "procrastinate_jobs", "procrastinate_events")
    elapsed = _drain_with(_procrastinate_worker, dsn, f"SELECT count(*) = {int(n)} FROM procrastinate_jobs WHERE status = 'succeeded'")
    with conn(dsn) as c:
        done = c.execute("SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'").fetchone()[0]
        twice = c.execute(
            "SELECT count(*) FROM (SELECT job_id FROM procrastinate_events WHERE type = 'started' "
            "GROUP BY job_id HAVING count(*) > 1) x").fetchone()[0]
        span = c.execute(
            "SELECT extract(epoch FROM max(at) FILTER (WHERE type = 'succeeded') - min(at) FILTER (WHERE type = 'started')) "
            "FROM procrastinate_events").fetchone()[0]
    check(done == n, f"procrastinate: {done} of {n} jobs succeeded")
    check(twice == 0, f"procrastinate: {twice} jobs started twice")
    return {"rate": n / elapsed, "ledger_rate": n / float(span)}


def procrastinate_enqueue(dsn: str, n: int) -> dict:
    r = asyncio.run(_procrastinate_enqueue(dsn, n))
    with conn(dsn) as c:
        count = c.execute("SELECT count(*) FROM procrastinate_jobs").fetchone()[0]
    check(count == n + 1, f"procrastinate: {count} jobs deferred, expected {n + 1}")
    return r


# --- pgqueuer -------------------------------------------------------------------

async def _pgq_queries(dsn: str):
    from pgqueuer import PsycopgDriver, Queries

    aconn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    return aconn, Queries(PsycopgDriver(aconn))


async def _pgqueuer_enqueue(dsn: str, n: int) -> dict:
    aconn, q = await _pgq_queries(dsn)
    async with aconn:
        if not await q.schema_is_installed():
            await q.install()
        await q.enqueue("noop", None)  # warm
        t0 = now()
        for _ in range(n // 2):
            await q.enqueue("noop", None)
        single = now() - t0
        t0 = now()
        rest = n - n // 2
        for i in range(0, rest, BATCH):
            m = min(BATCH, rest - i)
            await q.enqueue(["noop"] * m, [None] * m, [0] * m)
        batched = now() - t0
    return {"single": (n // 2) / single, "batch": rest / batched}


def pgqueuer_enqueue(dsn: str, n: int) -> dict:
    r = asyncio.run(_pgqueuer_enqueue(dsn, n))
    with conn(dsn) as c:
        count = c.execute("SELECT count(*) FROM pgqueuer").fetchone()[0]
    check(count == n + 1, f"pgqueuer: {count} jobs enqueued, expected {n + 1}")
    return r


def _pgqueuer_worker(dsn: str, name: str, start) -> None:
    logging.disable(logging.CRITICAL)
    from pgqueuer import QueueManager
    from pgqueuer.domain.types import QueueExecutionMode

    async def main():
        aconn, q = await _pgq_queries(dsn)
        async with aconn:
            qm = QueueManager(q)

            @qm.entrypoint("noop")
            async def noop(job) -> None:
                return None

            start.wait()
            await qm.run(mode=QueueExecutionMode.drain)

    asyncio.run(main())


def pgqueuer_drain(dsn: str, n: int) -> dict:
    async def fill():
        aconn, q = await _pgq_queries(dsn)
        async with aconn:
            for i in range(0, n, BATCH):
                m = min(BATCH, n - i)
                await q.enqueue(["noop"] * m, [None] * m, [0] * m)

    with conn(dsn) as c:
        c.execute("TRUNCATE pgqueuer, pgqueuer_log RESTART IDENTITY")
    asyncio.run(fill())
    vacuum_analyze(dsn, "pgqueuer", "pgqueuer_log")
    elapsed = _drain_with(_pgqueuer_worker, dsn, f"SELECT NOT EXISTS (SELECT FROM pgqueuer) AND (SELECT count(*) FROM pgqueuer_log WHERE status = 'successful') = {int(n)}")
    with conn(dsn) as c:
        left = c.execute("SELECT count(*) FROM pgqueuer").fetchone()[0]
        done, distinct = c.execute(
            "SELECT count(*), count(DISTINCT job_id) FROM pgqueuer_log WHERE status = 'successful'").fetchone()
        span = c.execute(
            "SELECT extract(epoch FROM max(created) - min(created)) FROM pgqueuer_log").fetchone()[0]
    check(left == 0, f"pgqueuer: {left} jobs left in the queue")
    check(done == n == distinct, f"pgqueuer: {done} successes for {distinct} jobs, expected {n}")
    return {"rate": n / elapsed, "ledger_rate": n / float(span) if span else None}


# --- the common drain harness ---------------------------------------------------

def _drain_with(target, dsn: str, done_sql: str) -> float:
    """Starts N_RUNNERS worker processes, releases them together, and times until
    done_sql (polled every 10 ms on a connection of our own) says all jobs are done:
    a system that flushes its completions in batches or lingers before exiting is
    timed by when its work is done, not by when its processes exit."""
    ctx = multiprocessing.get_context("fork")
    start = ctx.Barrier(N_RUNNERS + 1)
    procs = [ctx.Process(target=target, args=(dsn, f"bench-{i}", start)) for i in range(N_RUNNERS)]
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
    return elapsed


def _median_drain(drain, dsn: str, n: int, reps: int) -> dict:
    """The drain is the noisiest figure (worker start-up, NOTIFY timing): median of reps."""
    runs = sorted((drain(dsn, n) for _ in range(reps)), key=lambda f: f["rate"])
    pick = dict(runs[len(runs) // 2])
    pick["all"] = [f["rate"] for f in runs]
    return pick


def run(dsn_for, quick: bool = False) -> Result:
    """dsn_for(name) -> the DSN of a fresh database of that name (ours migrated)."""
    n = 2_000 if quick else 10_000
    reps = 1 if quick else 3
    v = versions()
    rows, notes, figures = [], [], {}
    ours_dsn = dsn_for("bench_cmp_ours", migrate=True)
    figures["ours"] = {"enqueue": ours_enqueue(ours_dsn, n), "drain": _median_drain(ours_drain, ours_dsn, n, reps)}
    systems = [("procrastinate", procrastinate_enqueue, procrastinate_drain),
               ("pgqueuer", pgqueuer_enqueue, pgqueuer_drain)]
    for name, enq, drain in systems:
        if v[name] is None:
            notes.append(f"{name} is not installed (pip install -e '.[bench]'): skipped.")
            continue
        dsn = dsn_for(f"bench_cmp_{name}", migrate=False)
        try:
            figures[name] = {"enqueue": enq(dsn, n), "drain": _median_drain(drain, dsn, n, reps)}
        except Exception as e:  # a comparison that breaks is reported, not fatal
            notes.append(f"{name} failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    ours = figures["ours"]
    for name, f in figures.items():
        label = "scrinalia-workers (ours)" if name == "ours" else f"{name} {v[name]}"
        ratio = lambda key, sub: "1.00" if name == "ours" else f"{ours[key][sub] / f[key][sub]:.2f}"  # noqa: E731
        rows.append([
            label,
            f"{f['enqueue']['single']:,.0f}", ratio("enqueue", "single"),
            f"{f['enqueue']['batch']:,.0f}", ratio("enqueue", "batch"),
            f"{f['drain']['rate']:,.0f}" + (f" ({', '.join(f'{x:,.0f}' for x in f['drain']['all'])})"
                                             if len(f["drain"]["all"]) > 1 else ""),
            ratio("drain", "rate"),
            f"{f['drain']['ledger_rate']:,.0f}" if f["drain"]["ledger_rate"] else "-",
        ])
    notes += [
        "Ours has no batch enqueue (a worker's queue is one slot); its 'batch' column is the same "
        f"scrinalia.enqueue() call sent {BATCH} at a time in psycopg's pipeline mode. Theirs is "
        f"procrastinate's batch_defer_async() / pgqueuer's list enqueue, {BATCH} jobs per call.",
        "Ours does more per job than either: request validation against the catalogue, config "
        "resolution, the one-slot check, a leased and fenced claim, a ledger row kept for ever. "
        "procrastinate keeps its job rows (status succeeded) plus an events table; pgqueuer deletes "
        "a finished job and logs it in pgqueuer_log. pgqueuer dequeues in batches (its default batch_size=10) "
        "and buffers its completions, so it makes fewer round trips per job than a claim-one/finish-one loop; "
        "procrastinate's worker runs over its own connection pool (psycopg_pool defaults) plus a LISTEN "
        "connection in each process, so it holds more than one connection per worker.",
        "Claim-run-finish/s = N / the time from the start barrier (worker processes forked, ours connected) "
        "until all N jobs are done, polled every 10 ms in the database for theirs (ours: until the last runner "
        "reports); it includes each system's worker start-up. '(ledger)' is N / (last finish - first start) "
        "from each system's own timestamps (pgqueuer's log rows are written when its buffer flushes, "
        "so its figure there is not comparable).",
    ]
    return Result(
        key="compare",
        title="5. Side by side: procrastinate and pgqueuer",
        setup=[
            f"Same cluster, one database per system; {n:,} jobs; an empty task; psycopg {v['psycopg']} everywhere.",
            f"Enqueue: half of the jobs one call at a time from one connection, half in batches of {BATCH}.",
            f"Claim-run-finish: {n:,} queued jobs drained by {N_RUNNERS} worker processes, median of {reps} "
            "(all runs in brackets) "
            "(ours: the runner loop of benchmark 3; procrastinate: run_worker_async(concurrency=1, wait=False) "
            "per process; pgqueuer: QueueManager.run(mode=drain) per process).",
        ],
        headers=["system", "enqueue/s (single)", "ours/theirs", "enqueue/s (batch)", "ours/theirs",
                 "claim-run-finish/s", "ours/theirs", "(ledger)"],
        rows=rows,
        target="none: figures as they are",
        met=None,
        headline="claim-run-finish ours/theirs: " + ", ".join(
            f"{k} {ours['drain']['rate'] / f['drain']['rate']:.2f}x" for k, f in figures.items() if k != "ours"),
        notes=notes,
        data={"figures": figures, "versions": v, "n": n},
    )
