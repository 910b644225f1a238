"""Benchmark: enqueue through the API, one enqueue() call at a time and enqueue_runs() in bulk.

enqueue_runs: one call enqueueing N runs (10,000 and 100,000), the arrays sent as two
parameters; runs/s from the call sent to its rows read. enqueue(): N calls from one
connection, `SELECT run_id FROM scrinalia.enqueue(...)` each as a psycopg prepared
statement (prepare=True: parsed and planned once, as a client sending the same call
10,000 times would), first all in one transaction (COMMIT included), then each its own
(autocommit); calls/s. Each is set
against its floor, the same rows written by plain statements with the configs computed
beforehand: one INSERT ... SELECT FROM unnest(...) for the bulk form, N one-row INSERTs
(in one transaction, in autocommit, prepared as the calls are) for the single calls. The forms run in rotation,
their order shifted in each of the rounds; medians and ranges of the rounds.

Self-checking: after every measure the ledger holds exactly the N runs, QUEUED, one per
worker, and their (worker, request, config, config_sources) equal those one enqueue()
call per worker wrote in the first round.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import psycopg
from psycopg.types.json import Jsonb

from . import seed
from .common import Result, check, conn, median, now, vacuum_analyze

BULK_SQL = "SELECT run_id FROM scrinalia.enqueue_runs(%s::text[], %s::jsonb[], 'MANUAL', 'bench')"
SINGLE_SQL = "SELECT run_id FROM scrinalia.enqueue(%s, %s::jsonb, 'MANUAL', 'bench')"
FLOOR_BULK_SQL = (
    "INSERT INTO scrinalia.archive_worker_runs (worker_name, trigger, request, config, config_sources, requested_by) "
    "SELECT u.w, 'MANUAL', u.q, u.c, u.s, 'bench' FROM unnest(%s::text[], %s::jsonb[], %s::jsonb[], %s::jsonb[]) "
    "AS u(w, q, c, s) ORDER BY u.w"
)
FLOOR_ONE_SQL = (
    "INSERT INTO scrinalia.archive_worker_runs (worker_name, trigger, request, config, config_sources, requested_by) "
    "VALUES (%s, 'MANUAL', %s::jsonb, %s::jsonb, %s::jsonb, 'bench') RETURNING run_id"
)
ROWS_SQL = (
    "SELECT worker_name, request, config, config_sources, status::text FROM scrinalia.archive_worker_runs "
    "ORDER BY worker_name"
)
REQUEST = {"options": {"dpi": 600}}  # every 4th run's request, validated against the catalogue
TARGET_BULK, TARGET_SINGLE = 20_000, 2_000


def request(i: int) -> str:
    return json.dumps(REQUEST) if i % 4 == 0 else "{}"


def empty(c: psycopg.Connection) -> None:
    c.execute("TRUNCATE scrinalia.archive_worker_runs")
    c.execute("VACUUM ANALYZE scrinalia.archive_worker_runs")


def stored(c: psycopg.Connection) -> list[tuple]:
    return [tuple(r) for r in c.execute(ROWS_SQL).fetchall()]


def verify(c: psycopg.Connection, n: int, reference: list[tuple], what: str) -> None:
    rows = stored(c)
    check(len(rows) == n, f"{what}: {len(rows)} runs in the ledger, {n} enqueued")
    check(all(r[4] == "QUEUED" for r in rows), f"{what}: a run is not QUEUED")
    check(len({r[0] for r in rows}) == n, f"{what}: a worker has two runs")
    check([r[:4] for r in rows] == [r[:4] for r in reference[:n]], f"{what}: other runs than enqueue() writes")


def bulk(c: psycopg.Connection, workers: list[str], requests: list[str]) -> float:
    t0 = now()
    got = c.execute(BULK_SQL, (workers, requests)).fetchall()
    seconds = now() - t0
    check(len(got) == len(workers), f"enqueue_runs returned {len(got)} rows for {len(workers)} workers")
    return seconds


def bulk_floor(c: psycopg.Connection, n: int, reference: list[tuple]) -> float:
    cols = list(zip(*reference[:n], strict=False))
    args = (
        list(cols[0]),
        [json.dumps(v) for v in cols[1]],
        [json.dumps(v) for v in cols[2]],
        [json.dumps(v) for v in cols[3]],
    )
    t0 = now()
    c.execute(FLOOR_BULK_SQL, args)
    return now() - t0


def singles(c: psycopg.Connection, workers: list[str], requests: list[str], one_txn: bool) -> float:
    t0 = now()
    if one_txn:
        c.execute("BEGIN")
    for w, q in zip(workers, requests, strict=True):
        c.execute(SINGLE_SQL, (w, q), prepare=True).fetchone()
    if one_txn:
        c.execute("COMMIT")
    return now() - t0


def singles_floor(c: psycopg.Connection, reference: list[tuple], n: int, one_txn: bool) -> float:
    args = [(r[0], Jsonb(r[1]), Jsonb(r[2]), Jsonb(r[3])) for r in reference[:n]]
    t0 = now()
    if one_txn:
        c.execute("BEGIN")
    for a in args:
        c.execute(FLOOR_ONE_SQL, a, prepare=True).fetchone()
    if one_txn:
        c.execute("COMMIT")
    return now() - t0


def measure(dsn: str, n_single: int, bulk_sizes: list[int], rounds: int) -> dict:
    n_max = max(bulk_sizes + [n_single])
    workers = [seed.worker_name(i) for i in range(n_max)]
    requests = [request(i) for i in range(n_max)]
    with conn(dsn) as c:
        # the reference: one enqueue() per worker, the rows every form must write
        # (pipelined, untimed)
        empty(c)
        with c.transaction(), c.pipeline():
            for w, q in zip(workers, requests, strict=True):
                c.execute(SINGLE_SQL, (w, q))
        reference = stored(c)
        forms: list[tuple[str, int, Callable[[], float]]] = []
        for n in bulk_sizes:
            forms.append((f"bulk {n}", n, lambda n=n: bulk(c, workers[:n], requests[:n])))
            forms.append((f"floor bulk {n}", n, lambda n=n: bulk_floor(c, n, reference)))
        for one_txn, label in ((True, "one transaction"), (False, "autocommit")):
            forms.append(
                (f"single {label}", n_single, lambda t=one_txn: singles(c, workers[:n_single], requests[:n_single], t))
            )
            forms.append(
                (f"floor single {label}", n_single, lambda t=one_txn: singles_floor(c, reference, n_single, t))
            )
        rates: dict[str, list[float]] = {name: [] for name, _, _ in forms}
        for r in range(rounds):
            shift = r * len(forms) // rounds
            for name, n, fn in forms[shift:] + forms[:shift]:
                empty(c)
                seconds = fn()
                verify(c, n, reference, name)
                rates[name].append(n / seconds)
        empty(c)
    return {"rates": rates, "n_single": n_single, "bulk_sizes": bulk_sizes, "rounds": rounds}


def rate(values: list[float]) -> str:
    return f"{median(values):,.0f}"


def spread(values: list[float]) -> str:
    return f"{min(values):,.0f}-{max(values):,.0f}"


def ratio(ours: list[float], floor: list[float]) -> str:
    """The floor's time over ours, round by round (1.0: as fast as plain INSERTs)."""
    r = [o / f for o, f in zip(ours, floor, strict=True)]
    return f"{median(r):.2f} ({min(r):.2f}-{max(r):.2f})"


def run(dsn: str, quick: bool = False) -> Result:
    n_single = 500 if quick else 10_000
    bulk_sizes = [1_000, 5_000] if quick else [10_000, 100_000]
    rounds = 3
    with conn(dsn) as c:
        seed.reset(c)
        seed.workers(c, max(bulk_sizes + [n_single]))
    vacuum_analyze(dsn, "scrinalia.archive_workers")
    m = measure(dsn, n_single, bulk_sizes, rounds)
    rates = m["rates"]
    # (label, key of ours, target, unit): the bulk calls, then the single calls
    forms = [(f"enqueue_runs, {n:,} runs in one call", f"bulk {n}", TARGET_BULK, "runs/s") for n in bulk_sizes]
    forms += [
        (f"enqueue(), {n_single:,} calls, {label}", f"single {label}", TARGET_SINGLE, "calls/s")
        for label in ("one transaction", "autocommit")
    ]
    rows, met = [], True
    for label, key, target, unit in forms:
        ours, floor = rates[key], rates[f"floor {key}"]
        ok = median(ours) >= target
        met = met and ok
        rows.append(
            [
                label,
                rate(ours),
                spread(ours),
                rate(floor),
                ratio(ours, floor),
                f">= {target:,} {unit}",
                "met" if ok else "NOT met",
            ]
        )
    return Result(
        key="enqueue",
        title="7. Enqueue through the API: enqueue() calls and enqueue_runs() in bulk",
        setup=[
            f"{max(bulk_sizes + [n_single]):,} catalogue workers (an engine, typed options, a default config: "
            f"the config is resolved for real); every 4th run with the request `{json.dumps(REQUEST)}`, validated "
            "against the catalogue, the others `{}`; requested_by 'bench'; an empty ledger before each measure.",
            "enqueue_runs: one call with all N workers and requests as two array parameters; timed from the call "
            "sent to its N rows read. Floor: the same rows (worker, request, config, sources computed beforehand) "
            "in one plain INSERT ... SELECT FROM unnest(...), in worker order, without the NOTIFYs.",
            f"enqueue(): {n_single:,} calls `SELECT run_id FROM scrinalia.enqueue(...)` from one connection "
            "(psycopg, the statement prepared: `prepare=True`), all in one transaction (its COMMIT timed) and then "
            "each its own (autocommit). Floor: the same rows as as many one-row INSERT ... RETURNING statements, "
            "prepared too, the same way.",
            f"{rounds} rounds, the forms in rotation with their order shifted each round; median and range. "
            "'vs floor': the floor's time over ours, per round (1.00 is as fast as plain INSERTs).",
            "Checked after every measure: exactly N runs, all QUEUED, one per worker, each with the request, "
            "config and config_sources that one enqueue() per worker wrote.",
        ],
        headers=["enqueue", "per s (median)", "range", "floor per s", "vs floor", "target", "verdict"],
        rows=rows,
        target=(
            f"enqueue_runs >= {TARGET_BULK:,} runs/s; enqueue() >= {TARGET_SINGLE:,} calls/s from one connection, "
            "in one transaction and in autocommit"
            if not quick
            else "quick mode: smoke sizes only"
        ),
        met=met if not quick else None,
        notes=[
            "enqueue() is enqueue_runs() of one element (both call enqueue_batch()): no subtransaction per call "
            "(an ON CONFLICT DO NOTHING answers a slot taken meanwhile, and every check returns its problem rather "
            "than raise it in an exception block), one generic plan per statement kept for the session, the one "
            "run's config from config_of() (no query), and the insert itself checks the slot. Against the previous "
            "release's enqueue(), written apart from enqueue_runs, a call costs about 30 microseconds more on the "
            "server: the batch's statements over arrays of one.",
            "enqueue_runs checks each rule once over the batch, takes the slots (catalogue rows FOR SHARE, "
            "schedule rows FOR KEY SHARE) and inserts in worker order, and sends one NOTIFY per run as enqueue(); "
            "from 100 elements its statements are planned with the arrays' values, and the insert and the "
            "foreign-key check of each inserted row keep one plan.",
        ],
        headline=(
            "; ".join(f"enqueue_runs({n:,}) {rate(rates[f'bulk {n}'])}/s" for n in bulk_sizes)
            + f"; enqueue() {rate(rates['single one transaction'])}/s in one transaction, "
            f"{rate(rates['single autocommit'])}/s autocommit"
        ),
        data=m,
    )
