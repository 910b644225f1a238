"""The Python peers of benchmark 5, procrastinate and pgqueuer, driven through their
own public APIs: their versions, schema set-up, apps and worker processes, written
once for the enqueue figures (compare_bench) and the drains (peers_drain).
graphile-worker, the Node peer, is bench/peers_graphile.py.

procrastinate: App(PsycopgConnector), an async @app.task, defer_async /
batch_defer_async, run_worker_async() with PROCRASTINATE[config]'s options.
pgqueuer: Queries over the driver PGQUEUER[config] names (asyncpg, as its README's
quick start and its benchmark tool, tools/benchmark.py, connect; or psycopg 3),
enqueue with scalars / lists, QueueManager.run() in continuous mode.
"""

from __future__ import annotations

import asyncio
import logging

import psycopg

from .common import conn

N_WORKERS = 4  # worker processes per system in the drains

# name -> run_worker_async() options. procrastinate's "tuned": async tasks run
# concurrently in one worker (its howto/production/concurrency), the rest default.
PROCRASTINATE = {"tuned": {"concurrency": 10}, "defaults": {}}
PROCRASTINATE_SETTINGS = {"tuned": "async task, concurrency 10", "defaults": "async task, concurrency 1"}

# name -> (driver, event loop, QueueManager.run() options). Its benchmark tool runs
# AsyncpgDriver over asyncpg.connect() under uvloop with run(batch_size=10), which is
# also run()'s default batch.
PGQUEUER = {
    "asyncpg": ("asyncpg", "uvloop", {"batch_size": 10}),
    "asyncpg, defaults": ("asyncpg", "asyncio", {}),
    "psycopg": ("psycopg", "uvloop", {"batch_size": 10}),
}


def versions() -> dict[str, str | None]:
    """The installed version of each peer (and its drivers); None where one is missing."""
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for name in ("procrastinate", "pgqueuer", "psycopg", "asyncpg", "uvloop"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def pgqueuer_settings(config: str, v: dict) -> str:
    driver, loop, opts = PGQUEUER[config]
    loop = loop if v.get(loop) or loop == "asyncio" else "asyncio (uvloop is not installed)"
    return f"{driver} {v.get(driver)}, {loop}, run({', '.join(f'{k}={x}' for k, x in opts.items()) or 'defaults'})"


def pgqueuer_configs(v: dict) -> list[str]:
    """The pgqueuer configurations this machine can run (asyncpg's need asyncpg)."""
    if not v.get("pgqueuer"):
        return []
    return [k for k, (driver, _, _) in PGQUEUER.items() if v.get(driver)]


def run_loop(main, loop: str = "asyncio") -> None:
    """asyncio.run(main()), or uvloop.run() where asked and installed."""
    if loop == "uvloop":
        try:
            import uvloop

            uvloop.run(main())
            return
        except ImportError:
            pass
    asyncio.run(main())


# --- procrastinate --------------------------------------------------------------


def procrastinate_app(dsn: str, name: str | None = None):
    """An App with one empty async task, "noop"; name: its sessions' application_name."""
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


def procrastinate_worker(dsn: str, i: int, ready, config: str = "defaults") -> None:
    """A worker process (multiprocessing target): ready is set once it is connected."""
    logging.disable(logging.CRITICAL)
    app, _ = procrastinate_app(dsn, "bench-procrastinate")

    async def main():
        async with app.open_async():
            ready.set()
            await app.run_worker_async(name=f"bench-{i}", install_signal_handlers=False, **PROCRASTINATE[config])

    asyncio.run(main())


# --- pgqueuer -------------------------------------------------------------------


async def pgqueuer_queries(dsn: str, name: str | None = None, driver: str = "psycopg"):
    """(an autocommit connection, pgqueuer's Queries over it) on that driver; name:
    its application_name. The connection is closed with `await close(it)`."""
    from pgqueuer import Queries

    if driver == "asyncpg":
        import asyncpg
        from pgqueuer import AsyncpgDriver

        p = psycopg.conninfo.conninfo_to_dict(dsn)
        aconn = await asyncpg.connect(
            host=p.get("host"),
            port=int(p["port"]) if p.get("port") else None,
            user=p.get("user"),
            password=p.get("password"),
            database=p.get("dbname"),
            server_settings={"application_name": name or "bench-pgqueuer"},
        )
        return aconn, Queries(AsyncpgDriver(aconn))
    from pgqueuer import PsycopgDriver

    kw = {} if name is None else {"application_name": name}
    pconn = await psycopg.AsyncConnection.connect(dsn, autocommit=True, **kw)
    return pconn, Queries(PsycopgDriver(pconn))


async def close(aconn) -> None:
    await aconn.close()


def pgqueuer_install(dsn: str) -> None:
    async def install():
        aconn, q = await pgqueuer_queries(dsn)
        try:
            if not await q.schema_is_installed():
                await q.install()
        finally:
            await close(aconn)

    asyncio.run(install())


def pgqueuer_fill(dsn: str, n: int, driver: str = "psycopg") -> float:
    """n "noop" jobs in one enqueue() call (one statement, one commit) on that driver;
    returns the call's seconds."""
    out = []

    async def fill():
        from .common import now

        aconn, q = await pgqueuer_queries(dsn, driver=driver)
        try:
            t0 = now()
            await q.enqueue(["noop"] * n, [None] * n, [0] * n)
            out.append(now() - t0)
        finally:
            await close(aconn)

    asyncio.run(fill())
    return out[0]


def pgqueuer_worker(dsn: str, i: int, ready, config: str = "psycopg") -> None:
    """A continuous-mode worker process (multiprocessing target) in PGQUEUER[config];
    ready is set once connected."""
    logging.disable(logging.CRITICAL)
    from pgqueuer import QueueManager

    driver, loop, opts = PGQUEUER[config]

    async def main():
        aconn, q = await pgqueuer_queries(dsn, f"bench-pgq-{i}", driver)
        try:
            qm = QueueManager(q)

            @qm.entrypoint("noop")
            async def noop(job) -> None:
                return None

            ready.set()
            await qm.run(**opts)
        finally:
            await close(aconn)

    run_loop(main, loop)
