"""Benchmark 10: a ledger of ten million finished runs and 100,000 workers.

Two databases hold the same catalogue (the workers, a schedule each, the cron masks);
one of them also holds the history (bench.seed.history, packed: one INSERT ... SELECT
over generate_series per million rows, the metrics' tallies counted afresh, then VACUUM
ANALYZE). Round after round, each measure runs on one ledger and then the
other, the order swapped every round, so that the ratio of a round compares like
with like: the real runner's drain (drain_bench.runner_drain), the scheduler's pass
over the due schedules (tick_bench.pass_once), enqueue_runs() in bulk and enqueue()
calls (the calls of enqueue_bench). Then, on the large ledger alone: each query of monitoring/queries.yaml
(metrics_bench.measure), the sizes of the table and its indexes, and last
prune_runs() removing the oldest history while a claiming loop and a ticking loop
time their own statements on their own connections.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import drain_bench, enqueue_bench, metrics_bench, scale_prune, scale_sizes, seed, tick_bench
from .common import FOLD_SQL, Result, check, conn, median, now, vacuum_analyze, verdict

RUNS = "scrinalia.archive_worker_runs"
SCHEDULES = "scrinalia.archive_worker_schedules"

RATE_TARGET = 0.95  # each rate on the large ledger over the empty one's, same round
QUERY_TARGET = 0.5  # seconds, each query of queries.yaml (median, every row fetched)

# The history is written a million rows a statement: one statement of ten million
# would queue as many foreign-key checks in memory before its end.
HISTORY_PIECE = 1_000_000


@dataclass(frozen=True)
class Sizes:
    workers: int
    history: int  # finished runs in the large ledger, a multiple of 10 (seed.HISTORY_SQL's blocks)
    pruned: int  # of them, the oldest, removed by the prune (a multiple of 10: whole chains)
    due: int  # schedules due in each pass
    drain: int  # runs each drain
    bulk: int  # runs one enqueue_runs() call
    calls: int  # enqueue() calls
    rounds: int
    query_reps: int


FULL = Sizes(
    workers=100_000,
    history=10_000_000,
    pruned=1_000_000,
    due=10_000,
    drain=20_000,
    bulk=10_000,
    calls=5_000,
    rounds=5,  # the ratios' spread on 2 shared cores is a tenth: a median of five
    query_reps=3,
)
QUICK = Sizes(
    workers=2_000, history=20_000, pruned=10_000, due=200, drain=500, bulk=500, calls=200, rounds=1, query_reps=2
)

LEDGERS = ("empty", "large")

# The tick's rounds: the first `due` workers' schedules due a minute ago, the others
# paused (a schedule not due now would come due during the rounds, and one armed
# later than its cron's next occurrence is re-armed by the pass's repair), the
# bookkeeping of the last pass cleared.
ARM_DUE_SQL = f"""
UPDATE {SCHEDULES}
   SET enabled = worker_name < %(first_not_due)s,
       next_run_at = CASE WHEN worker_name < %(first_not_due)s THEN now() - interval '1 minute'
                          ELSE now() + interval '1 day' END,
       last_enqueued_at = NULL, last_skipped_at = NULL, last_run_id = NULL, last_skip_reason = NULL
"""
# Every run after the history: the drains', the enqueues', the ticks', the live rows.
CLEAR_SQL = f"DELETE FROM {RUNS} WHERE run_id > %s"
# As metrics_bench.prepare leaves a catalogue: due in the future, one in a hundred
# overdue, one in a hundred paused.
AT_REST_SQL = f"""
UPDATE {SCHEDULES}
   SET next_run_at = CASE WHEN worker_name ~ '00$' THEN now() - interval '1 hour' ELSE now() + interval '1 hour' END,
       enabled = worker_name !~ '50$'
"""
NONE_DUE_SQL = f"UPDATE {SCHEDULES} SET enabled = true, next_run_at = now() + interval '1 hour'"
STORE_MASKS_SQL = f"SELECT scrinalia.store_cron_masks(array_agg(DISTINCT cron), true) FROM {SCHEDULES}"
RETENTION_OFF_SQL = "SELECT scrinalia.set_run_retention(NULL)"
# The tallies counted afresh after the seeding, as the migrate after a restore counts
# them: the seeding's deltas, one per run, are no backlog a running ledger would have.
REBUILD_TALLIES_SQL = "SELECT scrinalia.rebuild_tallies()"
ENQUEUED_SQL = (
    f"SELECT count(*) AS runs, count(DISTINCT worker_name) AS workers FROM {RUNS} "
    "WHERE run_id > %s AND status = 'QUEUED'"
)


# --- the two ledgers -----------------------------------------------------------------


def build_catalogue(dsn: str, s: Sizes) -> None:
    """The workers, a schedule each, their cron masks (as put_schedules stores them),
    and the scheduler's retention off: the passes must tick over the same history,
    not delete from it (the prune is measured on its own)."""
    with conn(dsn) as c:
        seed.reset(c)
        seed.workers(c, s.workers)
        seed.schedules(c, s.workers)
        c.execute(STORE_MASKS_SQL)
        c.execute(RETENTION_OFF_SQL)


def add_history(dsn: str, s: Sizes) -> dict:
    """The history, packed, a piece at a time; then VACUUM ANALYZE and the tallies.
    Returns the first and last history run ids and the seconds each step took."""
    t0 = now()
    with conn(dsn) as c:
        for start in range(0, s.history, HISTORY_PIECE):
            n = min(HISTORY_PIECE, s.history - start)
            check(seed.history(c, n, s.workers, layout="dense") == n, f"history: {n} rows not all written")
        first, last = c.execute(f"SELECT min(run_id), max(run_id) FROM {RUNS}").fetchone()
    seeded = now() - t0
    t0 = now()
    with conn(dsn) as c:
        c.execute(REBUILD_TALLIES_SQL)
    tallied = now() - t0
    # after the rebuild: its deletion of the seeding's deltas leaves their pages dead, and
    # every fold reads the delta table whole (a running ledger folds its deltas as they
    # come, and vacuum keeps that table a few pages long)
    t0 = now()
    vacuum_analyze(dsn)
    return {"first": first, "upto": last, "seeded": seeded, "vacuumed": now() - t0, "tallied": tallied}


def clear(dsn: str, upto: int) -> None:
    """The ledger back to its history (or to nothing), vacuumed: each measure starts alike."""
    with conn(dsn) as c:
        c.execute(CLEAR_SQL, (upto,))
    vacuum_analyze(dsn, RUNS)


def arm_due(dsn: str, s: Sizes, upto: int) -> int:
    """The tick's state: `due` schedules due, a QUEUED manual run on every other of
    their workers (the live rows: half the decisions are skips), the tallies folded
    (else the pass's alerts check would fold the deltas of the last measures' runs,
    deleted by the benchmark, not by a scheduler). Returns the live rows."""
    with conn(dsn) as c:
        c.execute(CLEAR_SQL, (upto,))
        active = seed.active_runs(c, s.due)
        c.execute(ARM_DUE_SQL, {"first_not_due": seed.worker_name(s.due)})
        c.execute(FOLD_SQL)
    vacuum_analyze(dsn, RUNS, SCHEDULES)
    return active


# --- the measures of a round, on one ledger ------------------------------------------


def drain_rate(dsn: str, s: Sizes, upto: int, logdir: Path) -> float:
    """runs/s of the real runner processes draining `drain` runs."""
    return drain_bench.runner_drain(dsn, s.drain, None, logdir, history_upto=upto)["rate"]


def pass_rate(dsn: str, s: Sizes, upto: int) -> float:
    """Due schedules decided per second by the scheduler's pass (checked)."""
    active = arm_due(dsn, s, upto)
    p = tick_bench.pass_once(dsn)
    tick_bench.verify_pass(dsn, s.due, active, p)
    return s.due / p["pass"]


def check_enqueued(dsn: str, upto: int, n: int, what: str) -> None:
    with conn(dsn) as c:
        got = c.execute(ENQUEUED_SQL, (upto,)).fetchone()
    check(got == (n, n), f"{what}: {got[0]} QUEUED runs on {got[1]} workers, expected {n} on {n}")


def bulk_rate(dsn: str, s: Sizes, upto: int) -> float:
    """runs/s of one enqueue_runs() call over `bulk` workers (checked)."""
    clear(dsn, upto)
    workers = [seed.worker_name(i) for i in range(s.bulk)]
    requests = [enqueue_bench.request(i) for i in range(s.bulk)]
    with conn(dsn) as c:
        seconds = enqueue_bench.bulk(c, workers, requests)
    check_enqueued(dsn, upto, s.bulk, "enqueue_runs")
    return s.bulk / seconds


def calls_rate(dsn: str, s: Sizes, upto: int, one_txn: bool) -> float:
    """enqueue() calls/s from one connection, prepared (checked)."""
    clear(dsn, upto)
    workers = [seed.worker_name(i) for i in range(s.calls)]
    requests = [enqueue_bench.request(i) for i in range(s.calls)]
    with conn(dsn) as c:
        seconds = enqueue_bench.singles(c, workers, requests, one_txn)
    check_enqueued(dsn, upto, s.calls, "enqueue()")
    return s.calls / seconds


MEASURES = ("drain", "pass", "bulk", "calls in one transaction", "calls in autocommit")


def rounds(dsns: dict[str, str], uptos: dict[str, int], s: Sizes) -> dict[str, dict[str, list[float]]]:
    """Every measure on one ledger then the other, the order swapped each round.
    Returns {measure: {ledger: [rate per round]}}."""
    out: dict[str, dict[str, list[float]]] = {m: {name: [] for name in LEDGERS} for m in MEASURES}
    with tempfile.TemporaryDirectory(prefix="scrinalia-scale-") as tmp:
        logdir = Path(tmp)
        measures = {
            "drain": lambda d, u: drain_rate(d, s, u, logdir),
            "pass": lambda d, u: pass_rate(d, s, u),
            "bulk": lambda d, u: bulk_rate(d, s, u),
            "calls in one transaction": lambda d, u: calls_rate(d, s, u, True),
            "calls in autocommit": lambda d, u: calls_rate(d, s, u, False),
        }
        for r in range(s.rounds):
            order = LEDGERS if r % 2 == 0 else LEDGERS[::-1]
            for m, fn in measures.items():
                for name in order:
                    out[m][name].append(fn(dsns[name], uptos[name]))
                print(
                    f"  round {r + 1}/{s.rounds}: {m}: "
                    + ", ".join(f"{name} {out[m][name][-1]:,.0f}/s" for name in LEDGERS),
                    flush=True,
                )
    return out


# --- the large ledger alone ----------------------------------------------------------


def at_rest(dsn: str, s: Sizes, upto: int) -> None:
    """The catalogue, its live rows and each schedule's last run as metrics_bench.prepare
    leaves them."""
    with conn(dsn) as c:
        c.execute(CLEAR_SQL, (upto,))
        c.execute(AT_REST_SQL)
        seed.active_runs(c, s.workers, every=3)
        pointed = seed.last_runs(c)
        check(pointed == s.workers, f"{pointed} of {s.workers} schedules point at their last run")
    vacuum_analyze(dsn)


def none_due(dsn: str, upto: int) -> None:
    """No schedule due and no live row: the loops beside the prune make their own."""
    with conn(dsn) as c:
        c.execute(CLEAR_SQL, (upto,))
        c.execute(NONE_DUE_SQL)
    vacuum_analyze(dsn, RUNS, SCHEDULES)


def queries(dsn: str, s: Sizes) -> dict[str, dict]:
    """Each query of monitoring/queries.yaml, every row fetched (metrics_bench.measure)."""
    got = metrics_bench.measure(dsn, metrics_bench.exporter_queries(), s.query_reps)
    check(got["scrinalia_worker"]["rows"] == s.workers, "the worker metrics lost or added a worker")
    return got


# --- the report ----------------------------------------------------------------------


def ratio_row(label: str, unit: str, rates: dict[str, list[float]]) -> tuple[list[str], bool, float]:
    """The large ledger's rate over the empty one's, round by round; median and range."""
    ratios = [b / a for a, b in zip(rates["empty"], rates["large"], strict=True)]
    ok = median(ratios) >= RATE_TARGET
    row = [
        label,
        f"{median(rates['empty']):,.0f} {unit} ({min(rates['empty']):,.0f}-{max(rates['empty']):,.0f})",
        f"{median(rates['large']):,.0f} {unit} ({min(rates['large']):,.0f}-{max(rates['large']):,.0f})",
        f"{median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})",
        f">= {RATE_TARGET}x",
        verdict(ok),
    ]
    return row, ok, median(ratios)


def run(dsn_for, quick: bool = False, sizes_: Sizes | None = None) -> Result:
    """dsn_for(name) -> the DSN of a fresh migrated database of that name."""
    s = sizes_ or (QUICK if quick else FULL)
    check(s.history % 10 == 0 and s.pruned % 10 == 0 and s.pruned < s.history, "history and prune in whole blocks")
    check(s.drain <= s.workers and s.bulk <= s.workers and s.due <= s.workers, "more runs than workers")
    dsns = {"empty": dsn_for("bench_scale_empty"), "large": dsn_for("bench_scale_large")}
    for dsn in dsns.values():
        build_catalogue(dsn, s)
    history = add_history(dsns["large"], s)
    print(
        f"  history: {s.history:,} runs in {history['seeded']:.0f} s, VACUUM ANALYZE {history['vacuumed']:.0f} s, "
        f"tallies {history['tallied']:.0f} s",
        flush=True,
    )
    uptos = {"empty": 0, "large": history["upto"]}
    vacuum_analyze(dsns["empty"])
    t0 = now()
    rates = rounds(dsns, uptos, s)
    rounded = now() - t0

    at_rest(dsns["large"], s, uptos["large"])
    t0 = now()
    q = queries(dsns["large"], s)
    queried = now() - t0
    size = scale_sizes.sizes(dsns["large"])
    t0 = now()
    none_due(dsns["large"], history["upto"])
    p = scale_prune.prune(dsns["large"], s.workers, s.pruned, history["first"])
    print(f"  rounds {rounded:.0f} s, queries {queried:.0f} s, prune {now() - t0:.0f} s", flush=True)

    rows: list[list[str]] = []
    verdicts: list[bool] = []
    heads: list[str] = []
    for label, key, unit in (
        (f"1. drain of {s.drain:,} runs, 4 runner processes", "drain", "runs/s"),
        (f"2. scheduler's pass over {s.due:,} due schedules", "pass", "schedules/s"),
        (f"3. enqueue_runs({s.bulk:,})", "bulk", "runs/s"),
        (f"3. enqueue(), {s.calls:,} calls in one transaction", "calls in one transaction", "calls/s"),
        (f"3. enqueue(), {s.calls:,} calls in autocommit", "calls in autocommit", "calls/s"),
    ):
        row, ok, r = ratio_row(label, unit, rates[key])
        rows.append(row)
        verdicts.append(ok)
        heads.append(f"{key} {r:.2f}x")
    slowest_name, slowest = max(((name, median(f["times"])) for name, f in q.items()), key=lambda x: x[1])
    for name, f in q.items():
        ok = median(f["times"]) <= QUERY_TARGET
        verdicts.append(ok)
        rows.append(
            [
                f"4. {name} ({f['rows']:,} rows)",
                "-",
                f"{median(f['times']):.3f} s ({min(f['times']):.3f}-{max(f['times']):.3f}); "
                f"on the server {median(f['server']):.3f} s",
                "-",
                f"<= {QUERY_TARGET} s",
                verdict(ok),
            ]
        )
    heads.append(f"slowest query {slowest:.2f} s ({slowest_name})")
    prune_rows, prune_verdicts, prune_heads = scale_prune.report_rows(p)
    rows += prune_rows
    verdicts += prune_verdicts
    heads += prune_heads
    heads.append(f"{size['total'] / size['runs']:,.0f} bytes per run")
    rows += [
        [f"6. {part}, at {size['runs']:,} runs", "-", scale_sizes.per_run(b, size["runs"]), "-", "written down", "-"]
        for part, b in scale_sizes.size_parts(size)
    ]
    met = all(verdicts)
    return Result(
        key="scale",
        title="10. A ledger of ten million runs: rates, queries, prune and sizes",
        setup=[
            f"Two databases with the same catalogue: {s.workers:,} workers (bench.seed: a small engine catalogue), "
            "a schedule each (10 cron templates x 60 minutes x 8 zones, their cron masks stored), the scheduler's "
            "retention off (so that a pass ticks over the same history rather than delete from it: the prune is "
            f"measured on its own). The large one also holds {s.history:,} finished runs (bench.seed.history, layout "
            f"dense: one INSERT ... SELECT over generate_series per {HISTORY_PIECE:,} rows, each row written once, "
            f"pages packed; {history['seeded']:.0f} s), the metrics' tallies counted afresh, as a migrate after "
            f"a restore counts them (rebuild_tallies(): {history['tallied']:.0f} s; the seeding's deltas, one per "
            f"run, are no backlog a running ledger has), then VACUUM ANALYZE ({history['vacuumed']:.0f} s: after "
            "the rebuild, so that the deltas it deleted are not left as dead pages that every fold of the tallies "
            "reads), "
            "their mix that of seed.HISTORY_SQL (retry chains, FAILED, INTERRUPTED, CANCELLED, manual and CLI "
            "runs), their instants from 2020-01-01 on, a minute per block of ten runs.",
            f"{s.rounds} rounds; in each, every measure on one ledger and at once on the other, the order swapped "
            "every round, each from the same state (the runs after the history deleted, VACUUM ANALYZE); the ratio "
            "is large / empty of the same round; medians and ranges.",
            f"1. The real runner: 4 scrinalia-runner processes started and idle, {s.drain:,} runs made visible by "
            "one enqueue_runs() call, timed until the database says all are SUCCEEDED (drain_bench.runner_drain).",
            f"2. The scheduler's own pass (tick_bench.pass_once: reaping, retries, repair, chunks, every decision "
            f"logged) over {s.due:,} due schedules, a QUEUED manual run on every other of their workers (half "
            "skipped); the other schedules paused for these rounds (one not due would come due during them, or be "
            "re-armed by the pass's repair); the metrics' tallies folded before each pass (else its alerts check "
            "would fold the deltas of the runs the benchmark deleted since the last). Checked as benchmark 1 "
            "checks it.",
            f"3. enqueue_runs() of {s.bulk:,} runs in one call, and {s.calls:,} enqueue() calls, prepared, from "
            "one connection, in one transaction and in autocommit (enqueue_bench.bulk and singles); every 4th "
            "with a request; checked: N QUEUED runs on N workers.",
            "4. On the large ledger, the catalogue at rest as benchmark 8 has it (1% of the schedules overdue, "
            "1% paused, a QUEUED manual run on every third worker, each schedule's last_run_id on its newest "
            "scheduled attempt): each query "
            f"of monitoring/queries.yaml, median and range of {s.query_reps} calls after an untimed one, every row "
            "fetched (metrics_bench.measure), beside it the same query counted on the server.",
            f"5. prune_runs(now() - cut-off, {scale_prune.PRUNE_BATCH:,}) called until it returns 0, the cut-off the finish of "
            f"the first run after the oldest {s.pruned:,} (the only ones older). Meanwhile, each on its own "
            f"connection: a loop claiming {scale_prune.CLAIM_BATCH} runs at a time and finishing them (the runner's "
            f"claim_runs and finish_runs statements; when none is queued, {scale_prune.REFILL:,} more enqueued, "
            "untimed), and a loop ticking "
            f"{scale_prune.TICK_WORKERS} schedules due again before each turn (due_schedules(), the cron, tick(), commit); "
            f"every statement timed after a first, untimed turn; their worst during the prune, and over the "
            f"{scale_prune.LOOPS_ALONE:.0f} s before it (the loops alone). What they waited on: "
            f"pg_stat_activity sampled every {scale_prune.SAMPLE_EVERY * 1000:.0f} ms from a fifth connection, the "
            "wait event of each loop's session while a statement of its runs (none: CPU; Lock: a lock another "
            "session holds, with its kind; LWLock, IO: the server's own); the longest lock wait seen is the "
            "time between the first and last of consecutive looks that all found the session waiting on a lock.",
            "6. After VACUUM ANALYZE, before the prune: pg_relation_size (heap), the TOAST table with its index, "
            "pg_indexes_size and each index, pg_total_relation_size (also the free space and visibility maps); "
            "bytes per run: the total over the rows in the table.",
        ],
        headers=["figure", "empty ledger", f"{s.history:,} runs", "ratio (range)", "target", "verdict"],
        rows=rows,
        target=(
            f"with {s.history:,} finished runs and {s.workers:,} workers: the drain, the pass and the enqueues >= "
            f"{RATE_TARGET}x their rate on the empty ledger; every query of queries.yaml <= {QUERY_TARGET} s; "
            f"prune_runs >= {scale_prune.PRUNE_TARGET:,} runs/s with no claim, finish or tick statement over "
            f"{scale_prune.WAIT_TARGET * 1000:.0f} ms meanwhile; the sizes written down"
        ),
        met=met,
        notes=[
            f"During the prune the claiming loop finished {p['finished']:,} runs and the ticking loop decided "
            f"{p['decided']:,} schedules.",
        ],
        headline="; ".join(heads),
        data={"rates": rates, "queries": q, "sizes": size, "prune": p, "history": history, "sizes_used": s},
    )
