"""Benchmark 5: side by side with graphile-worker, pgqueuer and procrastinate on the
same PostgreSQL, each at its documented best configuration and at its defaults.

Each system gets a database of its own in the same cluster and is driven through
its own public API with an empty task:

- claim-run-finish: bench/drain_bench.py (ours, the bare statements) and
  bench/peers_drain.py (the peers): 4 worker processes per system started and idle,
  N jobs made visible by one call of the system's enqueue API (timed too), the time
  until the database says all are done; interleaved rounds, the order rotated;
- the same rounds on a durable cluster (fsync on) for ours, pgqueuer on asyncpg and
  graphile-worker tuned, with pgbench's one-row INSERT as the reference
  (bench/peers_durable.py; our own throwaway cluster only);
- enqueue: N/2 jobs one call at a time from one connection (the API's ordinary path).

The peers' set-up: bench/peers.py (Python), bench/peers_graphile.py (Node).
"""

from __future__ import annotations

import asyncio

from . import drain_bench, peers_durable, peers_graphile, seed
from .common import Result, check, conn, median, now, vacuum_analyze
from .peers import PGQUEUER, PROCRASTINATE_SETTINGS, pgqueuer_queries, pgqueuer_settings, procrastinate_app, versions

# --- one call at a time ---------------------------------------------------------


def ours_enqueue(dsn: str, n: int) -> float:
    with conn(dsn) as c:
        seed.reset(c)
        seed.workers(c, n)
    vacuum_analyze(dsn)
    names = [seed.worker_name(i) for i in range(n)]
    with conn(dsn) as c:
        c.execute("SELECT 1")
        t0 = now()
        for w in names:
            c.execute(drain_bench.ENQUEUE, (w,)).fetchone()
        single = now() - t0
        count = c.execute("SELECT count(*) FROM scrinalia.archive_worker_runs WHERE status = 'QUEUED'").fetchone()[0]
    check(count == n, f"ours: {count} runs enqueued, expected {n}")
    return n / single


async def _procrastinate_enqueue(dsn: str, n: int) -> float:
    app, noop = procrastinate_app(dsn)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        await noop.defer_async()  # warm the pool
        t0 = now()
        for _ in range(n):
            await noop.defer_async()
        return n / (now() - t0)


def procrastinate_enqueue(dsn: str, n: int) -> float:
    r = asyncio.run(_procrastinate_enqueue(dsn, n))
    with conn(dsn) as c:
        count = c.execute("SELECT count(*) FROM procrastinate_jobs").fetchone()[0]
    check(count == n + 1, f"procrastinate: {count} jobs deferred, expected {n + 1}")
    return r


async def _pgqueuer_enqueue(dsn: str, n: int) -> float:
    aconn, q = await pgqueuer_queries(dsn, driver=PGQUEUER["asyncpg"][0])
    try:
        if not await q.schema_is_installed():
            await q.install()
        await q.enqueue("noop", None)  # warm
        t0 = now()
        for _ in range(n):
            await q.enqueue("noop", None)
        return n / (now() - t0)
    finally:
        await aconn.close()


def pgqueuer_enqueue(dsn: str, n: int) -> float:
    r = asyncio.run(_pgqueuer_enqueue(dsn, n))
    with conn(dsn) as c:
        count = c.execute("SELECT count(*) FROM pgqueuer").fetchone()[0]
        c.execute("TRUNCATE pgqueuer")
    check(count == n + 1, f"pgqueuer: {count} jobs enqueued, expected {n + 1}")
    return r


def graphile_enqueue(dsn: str, n: int) -> float:
    peers_graphile.install(dsn)
    with conn(dsn) as c:
        t0 = now()
        for _ in range(n):
            c.execute("SELECT (graphile_worker.add_job('noop')).id").fetchone()
        r = n / (now() - t0)
        c.execute("TRUNCATE graphile_worker._private_jobs")
    return r


# each system's name under its bar in bench/figures.py's picture
SHORT = {
    "ours": "ours",
    "ours --batch 1": "ours\n--batch 1",
    "bare statements": "bare\nstatements",
    "bare statements, batched": "bare, 32\na claim",
    "graphile-worker, tuned": "graphile\ntuned",
    "graphile-worker, defaults": "graphile\ndefaults",
    "pgqueuer, asyncpg": "pgqueuer\nasyncpg",
    "pgqueuer, asyncpg, defaults": "pgqueuer\nasyncpg,\nasyncio",
    "pgqueuer, psycopg": "pgqueuer\npsycopg",
    "procrastinate, tuned": "procras-\ntinate\ntuned",
    "procrastinate, defaults": "procras-\ntinate\ndefaults",
}


def short_label(name: str) -> str:
    """The bar's label of a drain (the history drains named by their layout)."""
    if "ledger" in name:
        return "ours, big\nledger" + (",\npacked" if name.endswith("dense") else "")
    return SHORT.get(name, name)


def _ratios(drains: dict, a: str, b: str) -> list[float]:
    return [x / y for x, y in zip(drains[a]["rates"], drains[b]["rates"])]


def _fmt(rs: list[float]) -> str:
    return f"{median(rs):.2f}x" + (f" ({min(rs):.2f}-{max(rs):.2f})" if len(rs) > 1 else "")


def _labels(v: dict, history: int) -> dict[str, tuple[str, str]]:
    """system -> (its label, its settings)."""
    args = " ".join(drain_bench.RUNNER_ARGS) or "defaults"
    out = {
        "ours": (f"scrinalia-runner {v['scrinalia']}", args),
        drain_bench.history_system(history): ("the same", f"{history:,} finished runs in the ledger"),
        drain_bench.history_system(history, "dense"): ("the same", f"{history:,} finished runs packed (a restore)"),
        "ours --batch 1": ("scrinalia-runner", f"{args}, --batch 1"),
        "bare statements": ("the claim and finish statements, bare", "one run a claim"),
        "bare statements, batched": ("the same, bare", "32 runs a claim"),
        "graphile-worker, tuned": (f"graphile-worker {v['graphile-worker']}", peers_graphile.TUNED_SETTINGS),
        "graphile-worker, defaults": (f"graphile-worker {v['graphile-worker']}", peers_graphile.DEFAULT_SETTINGS),
    }
    for config in PGQUEUER:
        out[f"pgqueuer, {config}"] = (f"pgqueuer {v['pgqueuer']}", pgqueuer_settings(config, v))
    for config, text in PROCRASTINATE_SETTINGS.items():
        out[f"procrastinate, {config}"] = (f"procrastinate {v['procrastinate']}", text)
    return out


def _rows(drains: dict, labels: dict, n: int, single: dict, prefix: str = "") -> list[list[str]]:
    rows = []
    for name, f in drains.items():
        label, settings = labels[name]
        family = name.split(",")[0]
        first = name in ("ours", "graphile-worker, tuned", "pgqueuer, asyncpg", "procrastinate, tuned")
        rows.append(
            [
                prefix + label,
                settings,
                f"{f['median']:,.0f}",
                f"{f['min']:,.0f}-{f['max']:,.0f}",
                "1.00x" if name == "ours" else _fmt(_ratios(drains, "ours", name)),
                f"{n / median(f['enqueue']):,.0f}" if f.get("enqueue") else "-",
                f"{single[family]:,.0f}" if first and family in single else "-",
                f"{median(f['pages']):,.0f}" if f.get("pages") else "-",
            ]
        )
    return rows


def _targets(drains: dict, history: int, prefix: str = "") -> list[tuple[str, bool, str]]:
    checks = []
    for peer, want in (("graphile-worker, tuned", 1.0), ("pgqueuer, asyncpg", 1.5)):
        if peer in drains:
            rs = _ratios(drains, "ours", peer)
            checks.append((f"{prefix}ours >= {want:.1f}x {peer}", median(rs) >= want, _fmt(rs)))
    for bare in ("bare statements", "bare statements, batched"):
        if bare in drains:
            rs = _ratios(drains, "ours", bare)
            checks.append((f"ours >= half the {bare}", median(rs) >= 0.5, _fmt(rs)))
    if history:
        rs = _ratios(drains, drain_bench.history_system(history), "ours")
        checks.append((f"ours with {history:,} finished runs >= 0.95x the empty ledger", median(rs) >= 0.95, _fmt(rs)))
    return checks


def run(dsn_for, quick: bool = False, admin_dsn: str | None = None, durable: bool = False) -> Result:
    """dsn_for(name, migrate) -> the DSN of a fresh database of that name (ours migrated
    when migrate); admin_dsn and durable: the durable rounds (our own cluster only)."""
    from importlib.metadata import version

    n = 1_000 if quick else 10_000
    rounds = 1 if quick else 3
    v = {**versions(), "scrinalia": version("scrinalia-workers")}
    notes = []
    v["graphile-worker"], why = peers_graphile.ensure_installed()
    if why:
        notes.append(why)
    dsns = {"ours": dsn_for("bench_cmp_ours", migrate=True)}
    single = {"ours": ours_enqueue(dsns["ours"], n // 2)}
    for name, enq in (
        ("graphile-worker", graphile_enqueue),
        ("procrastinate", procrastinate_enqueue),
        ("pgqueuer", pgqueuer_enqueue),
    ):
        if v[name] is None:
            if name != "graphile-worker":
                notes.append(f"{name} is not installed (pip install -e '.[bench]'): skipped.")
            continue
        dsns[name] = dsn_for(f"bench_cmp_{name.replace('-', '_')}", migrate=False)
        single[name] = enq(dsns[name], n // 2)  # installs its schema
    if v["pgqueuer"] and not v["asyncpg"]:
        notes.append("asyncpg is not installed (pip install -e '.[bench]'): pgqueuer runs on psycopg only.")
    history = 20_000 if quick else 1_000_000
    dsns["history"] = dsn_for("bench_cmp_history", migrate=True)
    dsns["history dense"] = dsn_for("bench_cmp_history_dense", migrate=True)
    drains = drain_bench.run(dsns, n, rounds, v, history=history)
    labels = _labels(v, history)
    rows = _rows(drains, labels, n, single)
    checks = _targets(drains, history)
    dur = None
    if durable and admin_dsn:
        dur = peers_durable.run(admin_dsn, dsns, n, rounds, v, 2 if quick else 10)
        rows += _rows(dur["drains"], labels, n, {}, prefix="durable: ")
        checks += _targets(dur["drains"], 0, prefix="durable: ")
        if dur["pgbench"] is not None:
            tps = f"{dur['pgbench']:,.0f}"
            rows.append(
                [f"durable: pgbench, {peers_durable.PGBENCH_CLIENTS} clients", "one-row INSERT", tps] + ["-"] * 5
            )
    met = all(ok for name, ok, _ in checks if not name.startswith("durable"))
    ours_way = (
        "scrinalia.enqueue_runs() (one call)"
        if _has_enqueue_runs(dsns["ours"])
        else ("scrinalia.enqueue() for each run, pipelined in one transaction (enqueue_runs() is not in this schema)")
    )
    notes += [
        f"Claim-run-finish/s = N / the time from the commit that makes the N jobs visible until the database "
        "says all N are done, with every system's 4 worker processes started, connected and idle beforehand, "
        "the jobs created through the system's own public enqueue API: ours "
        f"{ours_way}; graphile-worker graphile_worker.add_jobs() (one call); pgqueuer Queries.enqueue() with "
        "lists (one call, on the row's driver); procrastinate batch_defer_async() (one call). The column "
        "'enqueue/s (N in one call)' is that call's own time. Every 10 ms the timer asks whether a job is still "
        "waiting or running, through the system's own index or table of live jobs (graphile-worker's primary "
        "key), and counts the N done once none is. Rounds are interleaved: each round runs every system once, "
        "starting at a different one each "
        "round; ratios are per round, median (range).",
        "Configurations. graphile-worker 'tuned' is its Performance page (worker.graphile.org/docs/performance): "
        f"{peers_graphile.TUNED_SETTINGS}; 'defaults' sets none of them ({peers_graphile.DEFAULT_SETTINGS}); "
        "Node workers from bench/node (package-lock.json, `npm ci`), their console log to a file, as our "
        "runners log to a file ('tuned' without graphile-worker's line per completed job, NO_LOG_SUCCESS=1, as "
        "its perfTest runs; 'defaults' with it). Every system's workers are started and settled before the "
        "commit: their sessions idle in pg_stat_activity (each graphile-worker process's LISTEN sent, after its "
        "first fetch returned), then 1 s more. pgqueuer: its README's quick start and its benchmark tool (tools/benchmark.py) "
        "connect with asyncpg (AsyncpgDriver over asyncpg.connect()); the tool runs under uvloop with "
        "run(batch_size=10), run()'s default batch; 'asyncpg, defaults' is the plain asyncio loop, 'psycopg' the "
        "tool's settings on PsycopgDriver. procrastinate: async task; 'tuned' runs concurrency=10 jobs in each "
        "worker (its howto/production/concurrency), 'defaults' concurrency 1; listen_notify on (its default). "
        f"Ours: the real `scrinalia-runner` processes with {' '.join(drain_bench.RUNNER_ARGS) or 'their defaults'} "
        "(bench/drain_bench.py RUNNER_ARGS), JSON log lines to a file, heartbeats, the start-up checks, an empty "
        "'*' handler (bench/any_handlers.py).",
        f"History: the same runner drain on a second database whose ledger holds {history:,} finished runs "
        "(bench.seed.history), laid out as use leaves it (written in chunks, each row written three times, "
        "vacuumed after each chunk) and packed (as a restore leaves it; no target: the free-space map hands the "
        "drain one new row a page, column 'heap pages'); the drained runs deleted between rounds; its ratio is "
        "to the empty ledger's drain of the same round.",
        "The bare statements are claim_runs' and finish_runs' UPDATEs written out (bench/drain_bench.py), "
        "prepared, without the PL/pgSQL around them; their runs are inserted directly, not enqueued.",
        "Ours does more per job than the peers: request validation against the catalogue, config resolution, "
        "the one-slot check, a leased and fenced claim, a ledger row kept for ever. procrastinate keeps its job "
        "rows plus an events table; pgqueuer deletes a finished job and logs it in pgqueuer_log; graphile-worker "
        "deletes a finished job.",
        f"enqueue/s (one call at a time): {n // 2:,} jobs from one connection, one API call each: ours "
        "scrinalia.enqueue(), graphile-worker graphile_worker.add_job(), pgqueuer enqueue() on asyncpg, "
        "procrastinate defer_async().",
    ]
    if dur:
        s = dur["settings"]
        notes.append(
            "Durable rows: the same rounds with "
            + ", ".join(f"{k}={x}" for k, x in s.items())
            + " (ALTER SYSTEM, reload), for ours, pgqueuer on asyncpg and graphile-worker tuned; pgbench: "
            f"{peers_durable.PGBENCH_CLIENTS} clients, one `INSERT` of one row a transaction, "
            f"{2 if quick else 10} s, transactions per second in the claim-run-finish column."
            + ("" if dur["pgbench"] is not None else " pgbench was not found: no reference line.")
        )
    return Result(
        key="compare",
        title="5. Claim-run-finish side by side: the real runner, graphile-worker, pgqueuer, procrastinate",
        setup=[
            f"Same cluster, one database per system; {n:,} no-op jobs; 4 worker processes per system; "
            f"{rounds} interleaved rounds; psycopg {v['psycopg']}, asyncpg {v['asyncpg']}, uvloop {v['uvloop']}, "
            f"graphile-worker {v['graphile-worker'] or '(not run)'} on Node.",
        ]
        + [f"Target: {name}: {'met' if ok else 'NOT met'} ({ratio})." for name, ok, ratio in checks],
        headers=[
            "system",
            "settings",
            "claim-run-finish/s (median)",
            "range",
            "ours/theirs (per round)",
            "enqueue/s (N in one call)",
            "enqueue/s (one call at a time)",
            "heap pages of the drained runs",
        ],
        rows=rows,
        target="real runner >= 1.0x graphile-worker tuned and >= 1.5x pgqueuer on asyncpg in the same rounds, "
        ">= half the bare statements, and with 1,000,000 finished runs in the ledger >= 0.95x its rate on an "
        "empty one",
        met=met,
        headline=f"ours {drains['ours']['median']:,.0f} runs/s; "
        + ", ".join(f"{name} {ratio}" for name, _, ratio in checks[:2]),
        notes=notes,
        data={
            "drains": drains,
            "durable": dur,
            "enqueue": single,
            "versions": v,
            "n": n,
            "short": {k: short_label(k) for k in drains},
        },
    )


def _has_enqueue_runs(dsn: str) -> bool:
    with conn(dsn) as c:
        return drain_bench.has_enqueue_runs(c)
