"""Benchmark 5: side by side with procrastinate and pgqueuer on the same PostgreSQL.

Each system gets a database of its own in the same cluster and is driven through
its own public API with an empty task:

- enqueue: N jobs one call at a time from one connection (the API's ordinary path),
  and N jobs in batches where the system has a batch API;
- claim-run-finish: bench/drain_bench.py (the real runner, the bare statements,
  pgqueuer in continuous and drain mode, procrastinate), interleaved rounds.

procrastinate: App(PsycopgConnector), @app.task, defer_async / batch_defer_async.
pgqueuer: Queries over a PsycopgDriver (psycopg 3 for all three systems), enqueue
with scalars / lists. The peers' set-up is bench/peers.py.
"""

from __future__ import annotations

import asyncio

from . import drain_bench, seed
from .common import Result, check, conn, median, now, vacuum_analyze
from .peers import BATCH, pgqueuer_queries, procrastinate_app, versions

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
        rest = names[n // 2 :]
        for i in range(0, len(rest), BATCH):
            with c.pipeline():
                for w in rest[i : i + BATCH]:
                    c.execute(ENQUEUE_SQL, (w,))
        batched = now() - t0
        count = c.execute("SELECT count(*) FROM scrinalia.archive_worker_runs WHERE status = 'QUEUED'").fetchone()[0]
    check(count == n, f"ours: {count} runs enqueued, expected {n}")
    return {"single": (n // 2) / single, "batch": len(rest) / batched}


# --- procrastinate --------------------------------------------------------------


async def _procrastinate_enqueue(dsn: str, n: int) -> dict:
    app, noop = procrastinate_app(dsn)
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


def procrastinate_enqueue(dsn: str, n: int) -> dict:
    r = asyncio.run(_procrastinate_enqueue(dsn, n))
    with conn(dsn) as c:
        count = c.execute("SELECT count(*) FROM procrastinate_jobs").fetchone()[0]
    check(count == n + 1, f"procrastinate: {count} jobs deferred, expected {n + 1}")
    return r


# --- pgqueuer -------------------------------------------------------------------


async def _pgqueuer_enqueue(dsn: str, n: int) -> dict:
    aconn, q = await pgqueuer_queries(dsn)
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


def run(dsn_for, quick: bool = False) -> Result:
    """dsn_for(name) -> the DSN of a fresh database of that name (ours migrated)."""
    n = 2_000 if quick else 10_000
    rounds = 1 if quick else 3
    v = versions()
    notes = []
    dsns = {"ours": dsn_for("bench_cmp_ours", migrate=True)}
    enqueue = {"ours": ours_enqueue(dsns["ours"], n)}
    for name, enq in (("procrastinate", procrastinate_enqueue), ("pgqueuer", pgqueuer_enqueue)):
        if v[name] is None:
            notes.append(f"{name} is not installed (pip install -e '.[bench]'): skipped.")
            continue
        dsns[name] = dsn_for(f"bench_cmp_{name}", migrate=False)
        enqueue[name] = enq(dsns[name], n)  # installs its schema
    history = 20_000 if quick else 1_000_000
    dsns["history"] = dsn_for("bench_cmp_history", migrate=True)
    dsns["history dense"] = dsn_for("bench_cmp_history_dense", migrate=True)
    drains = drain_bench.run(dsns, n, rounds, v, history=history)
    hist_key = drain_bench.history_system(history)
    dense_key = drain_bench.history_system(history, "dense")

    def ratios(a: str, b: str) -> list[float]:
        return [x / y for x, y in zip(drains[a]["rates"], drains[b]["rates"])]

    def fmt_ratio(rs: list[float]) -> str:
        return f"{median(rs):.2f}x" + (f" ({min(rs):.2f}-{max(rs):.2f})" if len(rs) > 1 else "")

    labels = {
        "ours": "scrinalia-runner (ours, --batch 32)",
        hist_key: f"the same, {history:,} finished runs in the ledger",
        dense_key: f"the same, {history:,} finished runs packed (as after a restore)",
        "ours --batch 1": "scrinalia-runner --batch 1",
        "bare statements": "the claim and finish statements, bare",
        "bare statements, batched": "the same, bare, 32 runs a claim",
        "pgqueuer": f"pgqueuer {v['pgqueuer']}",
        "pgqueuer, drain mode": f"pgqueuer {v['pgqueuer']}, drain mode",
        "procrastinate": f"procrastinate {v['procrastinate']}",
    }
    rows = []
    for name, f in drains.items():
        enq = enqueue.get(name.split(",")[0]) if name in ("ours", "pgqueuer", "procrastinate") else None
        rows.append(
            [
                labels[name],
                f"{f['median']:,.0f}",
                f"{f['min']:,.0f}-{f['max']:,.0f}",
                "1.00x" if name == "ours" else fmt_ratio(ratios("ours", name)),
                f"{enq['single']:,.0f}" if enq else "-",
                f"{enq['batch']:,.0f}" if enq else "-",
                f"{median(f['pages']):,.0f}" if f.get("pages") else "-",
            ]
        )
    checks = []
    peers = [k for k in ("pgqueuer", "pgqueuer, drain mode") if k in drains]
    if peers:
        best = max(peers, key=lambda k: drains[k]["median"])
        r = median(ratios("ours", best))
        checks.append((f"ours >= pgqueuer (its best figure, {best})", r >= 1.0, fmt_ratio(ratios("ours", best))))
    for bare in ("bare statements", "bare statements, batched"):
        r_bare = median(ratios("ours", bare))
        checks.append((f"ours >= half the {bare}", r_bare >= 0.5, fmt_ratio(ratios("ours", bare))))
    hist = ratios(hist_key, "ours")
    checks.append(
        (f"ours with {history:,} finished runs >= 0.95x the empty ledger", median(hist) >= 0.95, fmt_ratio(hist))
    )
    met = all(ok for _, ok, _ in checks)
    dense = fmt_ratio(ratios(dense_key, "ours"))
    notes += [
        "Claim-run-finish/s = N / the time from the commit that makes the N jobs visible until the database "
        "says all N are done, with every system's 4 worker processes started, connected "
        "and idle beforehand. Every 10 ms the timer asks whether a job is still waiting or running, through the "
        "system's own index of live jobs (a cost that does not grow with the history), and counts the N done "
        "once none is; except 'pgqueuer, drain mode', pgqueuer's best case: the jobs are queued first and "
        "its drain-mode workers are timed from their start barrier (start-up counted against it, no notification "
        "to wait for). Rounds are interleaved: each round runs every system once, starting at a different one "
        "each round; ratios are per round, median (range).",
        f"History: the same runner drain on a second database whose ledger holds {history:,} finished runs "
        "(bench.seed.history: scheduled chains, retries, manual runs, cancellations over the same workers), "
        "the drained runs deleted between rounds; its ratio is to the empty ledger's drain of the same round. "
        "The history is laid out as use leaves it: written in chunks of "
        f"{seed.HISTORY_CHUNK:,} runs, each run's row written three times (the enqueue's row, the claim's and "
        "the finish's new versions) and the table vacuumed after each chunk.",
        f"The same history packed full (written once, as a restore with COPY or a VACUUM FULL leaves it) is "
        f"measured too, with no target: {dense} of the empty ledger. Each packed page keeps a little free space, "
        "about one run's row; vacuum records it, and PostgreSQL's free-space map then hands those pages out, so "
        "the drain's new rows and their claim and finish versions land one per page across the whole history "
        "(column 'heap pages': the pages the drained runs end on) instead of a few hundred pages. A ledger that "
        "was used rather than restored has the space of its dead versions to fill, and the drained runs stay "
        "together.",
        "Ours: the jobs are one INSERT of N QUEUED runs plus the N NOTIFYs N enqueue() calls would send, in one "
        "commit; the runners are the real `scrinalia-runner` processes (JSON log lines to a file, heartbeats, "
        "the start-up checks) with an empty '*' handler (bench/any_handlers.py). The bare statements are "
        "claim_runs' and finish_runs' UPDATEs written out for one run at a time (bench/drain_bench.py), prepared, "
        "without the PL/pgSQL around them: the floor issue 12 measures the runner against.",
        "pgqueuer in continuous mode gets one notification per inserted job; it starts working about a second "
        "after a 10,000-job commit, which its drain-mode figure does not pay.",
        "Ours does more per job than either: request validation against the catalogue, config resolution, the "
        "one-slot check, a leased and fenced claim, a ledger row kept for ever. procrastinate keeps its job rows "
        "(status succeeded) plus an events table; pgqueuer deletes a finished job and logs it in pgqueuer_log.",
        "Enqueue/s: half of the N jobs one call at a time from one connection, half in batches of "
        f"{BATCH}: ours has no batch enqueue (a worker's queue is one slot), so its batch column is the same "
        "scrinalia.enqueue() call pipelined (psycopg pipeline mode); theirs is procrastinate's batch_defer_async() "
        "/ pgqueuer's list enqueue.",
    ]
    return Result(
        key="compare",
        title="5. Claim-run-finish side by side: the real runner, the bare statements, pgqueuer, procrastinate",
        setup=[
            f"Same cluster, one database per system; {n:,} jobs; an empty task; psycopg {v['psycopg']} everywhere; "
            f"4 worker processes per system; {rounds} interleaved rounds.",
        ]
        + [f"Target: {name}: {'met' if ok else 'NOT met'} ({ratio})." for name, ok, ratio in checks],
        headers=[
            "system",
            "claim-run-finish/s (median)",
            "range",
            "ours/theirs (per round)",
            "enqueue/s (single)",
            "enqueue/s (batch)",
            "heap pages of the drained runs",
        ],
        rows=rows,
        target="real runner >= pgqueuer in the same run, >= half the bare statements, and with 1,000,000 "
        "finished runs in the ledger >= 0.95x its rate on an empty one",
        met=met,
        headline=f"ours {drains['ours']['median']:,.0f} runs/s; "
        + ", ".join(f"{name} {ratio}" for name, _, ratio in checks),
        notes=notes,
        data={"drains": drains, "enqueue": enqueue, "versions": v, "n": n},
    )
