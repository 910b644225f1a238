"""Benchmark 1: one tick over N due schedules, and the scheduler's own pass over them.

The tick, in one transaction, with the scheduler's statements: `SELECT * FROM
scrinalia.due_schedules()`, then cron.next_occurrences(pairs, after=db_now) in Python,
then one `SELECT * FROM scrinalia.tick(names, nexts, 'bench')` (arrays sent binary, as
the scheduler sends them): one round trip for the tick itself, whatever N. Half of the
workers hold a QUEUED manual run, so half of the decisions are skips and half are
enqueues.

The pass: `Scheduler.tick()` itself over the same due schedules, as the daemon runs
it after a restart: chunks of SchedulerSettings.tick_chunk, each its own transaction, the lock checked
between them, every decision logged (to /dev/null), reaping and retries first.

The set-based floor (issue 12): the same rows locked, inserted and updated by plain
statements (no function: the due query as due_schedules() runs it, then one INSERT ...
SELECT with the UPDATE of the schedules in one statement, rows and arrays binary), the
configs copied from a table filled before the clock starts. Each round times the tick and the floor alternately on the same
re-armed data, the same way (connected first; SQL from the first statement to the
commit), and checks both wrote the same rows.
"""

from __future__ import annotations

import os
import time

import psycopg

from scrinalia_workers import cron
from scrinalia_workers.collector import YOUNG_THRESHOLD, tune_for_daemon
from scrinalia_workers.logs import EventLog
from scrinalia_workers.scheduler import daemon as scheduler
from scrinalia_workers.scheduler.settings import DEFAULTS

from . import seed
from .common import FOLD_SQL, Result, check, conn, median, now, vacuum_analyze

# the scheduler's statements (scheduler._tick_chunk), over all N at once, binary as it
DUE_SQL = "SELECT worker_name, cron, timezone, next_run_at, db_now FROM scrinalia.due_schedules()"
TICK_SQL = "SELECT * FROM scrinalia.tick(%b::text[], %b::timestamptz[], 'bench')"

# The floor: what due_schedules() + tick() write, by plain statements.
FLOOR_DUE_SQL = """
SELECT s.worker_name, s.cron, s.timezone, s.next_run_at, now()
  FROM scrinalia.archive_worker_schedules s
 WHERE s.enabled
   AND (s.next_run_at IS NULL OR s.next_run_at <= now() OR s.next_run_at = 'infinity')
   AND (s.arm_retry_at IS NULL OR s.arm_retry_at <= now())
 ORDER BY s.next_run_at NULLS FIRST, s.worker_name
   FOR UPDATE OF s SKIP LOCKED
"""
FLOOR_WRITE_SQL = """
WITH d AS (
    SELECT i.w, i.n, s.request, s.next_run_at AS was, a.run_id AS active
      FROM unnest(%b::text[], %b::timestamptz[]) AS i(w, n)
      JOIN scrinalia.archive_worker_schedules s ON s.worker_name = i.w
      LEFT JOIN scrinalia.archive_worker_runs a ON a.worker_name = i.w AND a.status IN ('QUEUED', 'RUNNING')
), ins AS (
    INSERT INTO scrinalia.archive_worker_runs
           (worker_name, trigger, request, config, config_sources, scheduled_for, requested_by)
    SELECT d.w, 'SCHEDULE', d.request, f.config, f.sources, d.was, 'scheduler'
      FROM d JOIN bench_floor_config f ON f.worker_name = d.w
     WHERE d.active IS NULL
    RETURNING run_id, worker_name
)
UPDATE scrinalia.archive_worker_schedules s
   SET next_run_at = d.n,
       last_enqueued_at = CASE WHEN ins.run_id IS NOT NULL THEN now() ELSE s.last_enqueued_at END,
       last_run_id = coalesce(ins.run_id, s.last_run_id),
       last_skipped_at = CASE WHEN ins.run_id IS NULL THEN now() ELSE s.last_skipped_at END,
       last_skip_reason = CASE WHEN ins.run_id IS NULL THEN format('run #%%s is active', d.active)
                               ELSE s.last_skip_reason END,
       skipped_count = s.skipped_count + (ins.run_id IS NULL)::int,
       arm_error = NULL, arm_error_since = NULL, arm_retry_at = NULL
  FROM d LEFT JOIN ins ON ins.worker_name = d.w
 WHERE s.worker_name = d.w
"""


def prepare(dsn: str, n: int) -> int:
    """A fresh catalogue of n workers, n due schedules, an active run on every other
    worker. Returns the number of active runs."""
    with conn(dsn) as c:
        seed.reset(c)
        seed.workers(c, n)
        seed.schedules(c, n)
        active = seed.active_runs(c, n)
        # the cron masks the tick checks instants with, as put_schedules stores them
        c.execute(
            "SELECT scrinalia.store_cron_masks(array_agg(DISTINCT cron), true) FROM scrinalia.archive_worker_schedules"
        )
    with conn(dsn) as c:
        # the floor's configs, resolved before any clock starts (the floor only copies them)
        c.execute("DROP TABLE IF EXISTS bench_floor_config")
        c.execute(
            "CREATE TABLE bench_floor_config AS SELECT rc.worker_name, rc.config, rc.sources"
            " FROM (SELECT array_agg(worker_name) AS w, array_agg(request) AS r"
            "       FROM scrinalia.archive_worker_schedules) a,"
            " scrinalia.resolve_configs(a.w, a.r) rc"
        )
        c.execute("ALTER TABLE bench_floor_config ADD PRIMARY KEY (worker_name)")
    vacuum_analyze(dsn)
    vacuum_analyze(dsn, "bench_floor_config")
    return active


def rearm(dsn: str) -> None:
    """Puts the schedules back in the past and removes the runs the last tick created,
    so that the next tick has the same work (the clock is data). The skips start again
    too: counted on from round to round, the busy half's schedules would be starved
    after three, and the one pass that came next would announce that many alerts, a
    cost that round alone paid."""
    with conn(dsn) as c:
        c.execute("DELETE FROM scrinalia.archive_worker_runs WHERE trigger = 'SCHEDULE' AND status = 'QUEUED'")
        c.execute(
            "UPDATE scrinalia.archive_worker_schedules SET next_run_at = now() - interval '1 minute', "
            "last_enqueued_at = NULL, last_skipped_at = NULL, last_run_id = NULL, last_skip_reason = NULL, "
            "skipped_count = 0, skipped_count_at_enqueue = 0"
        )
        # the deletes' tally deltas folded here, by the bench that made them: a running
        # ledger never deletes queued runs, and the pass's alerts chore would fold them
        c.execute(FOLD_SQL)
    vacuum_analyze(dsn, "scrinalia.archive_worker_runs", "scrinalia.archive_worker_schedules")


def tick_once(c: psycopg.Connection) -> dict:
    """One scheduler tick; returns its timings (seconds) and decisions."""
    cron._parse.cache_clear()  # cold: the first tick of a fresh scheduler process
    cur = c.cursor(binary=True)
    t0 = now()
    with c.transaction():
        due = cur.execute(DUE_SQL).fetchall()
        t1 = now()
        after = due[0][4] if due else None
        nexts = cron.next_occurrences([(r[1], r[2]) for r in due], after=after) if due else []
        t2 = now()
        decisions = cur.execute(TICK_SQL, ([r[0] for r in due], nexts)).fetchall()
        t3 = now()
    t4 = now()
    counts: dict[str, int] = {}
    for d in decisions:
        counts[d[1]] = counts.get(d[1], 0) + 1
    return {
        "db_now": after,
        "due": len(due),
        "pairs": len({(r[1], r[2]) for r in due}),
        "decisions": counts,
        "total": t4 - t0,
        "sql_due": t1 - t0,
        "python": t2 - t1,
        "sql_tick": t3 - t2,
        "commit": t4 - t3,
    }


def pass_once(dsn: str) -> dict:
    """One pass of a Scheduler that has just taken the lock (connected, not timed), its
    cron parse cache cleared: from the call to its return, every chunk committed and
    every decision logged."""
    with open(os.devnull, "w") as sink:
        s = scheduler.Scheduler(dsn, name="bench", log=EventLog(stream=sink))
        try:
            check(s._acquire(), "the bench's scheduler did not get the lock")
            db_now = s.work_conn.execute("SELECT now()").fetchone()[0]
            cron._parse.cache_clear()
            t0 = now()
            progressed = s.tick()
            t1 = now()
        finally:
            if s.lock_conn is not None:
                s.lock_conn.execute("SELECT pg_advisory_unlock(scrinalia.scheduler_lock_key())")
            s._close()
    check(progressed, "the pass decided nothing")
    return {"db_now": db_now, "pass": t1 - t0}


def verify_pass(dsn: str, n: int, active: int, p: dict) -> None:
    """The pass decided every schedule (its decisions are checked through the rows, and
    the rows against the tick's by the fingerprint)."""
    with conn(dsn) as c:
        skipped = c.execute(
            "SELECT count(*) FROM scrinalia.archive_worker_schedules WHERE last_skipped_at IS NOT NULL"
        ).fetchone()[0]
    check(skipped == active, f"the pass skipped {skipped}, expected {active}")
    verify(dsn, n, active, {**p, "due": n, "decisions": {"ENQUEUED": n - active, "SKIPPED": active}})


def floor_once(c: psycopg.Connection) -> dict:
    """The same rows by plain statements, in one transaction, with the cron computation
    the pass also pays: the due query, the next occurrences of each distinct (cron,
    zone) pair with croniter's parse cache cleared (cold, as a scheduler's first pass),
    one write, the commit."""
    cron._parse.cache_clear()
    cur = c.cursor(binary=True)  # rows and arrays binary both ways, as the pass sends them
    t0 = now()
    with c.transaction():
        due = cur.execute(FLOOR_DUE_SQL).fetchall()
        t1 = now()
        names = [r[0] for r in due]
        at = cron.next_occurrences([(r[1], r[2]) for r in due], after=due[0][4]) if due else []
        t2 = now()
        written = cur.execute(FLOOR_WRITE_SQL, (names, at)).rowcount
        t3 = now()
    t4 = now()
    return {
        "db_now": due[0][4] if due else None,
        "due": len(due),
        "written": written,
        "sql": (t1 - t0) + (t4 - t2),
        "total": t4 - t0,
        "python": t2 - t1,
        "sql_due": t1 - t0,
        "sql_write": t3 - t2,
        "commit": t4 - t3,
    }


def verify(dsn: str, n: int, active: int, t: dict) -> None:
    """Every due schedule decided once, the right way, and advanced into the future."""
    check(t["due"] == n, f"due_schedules returned {t['due']} of {n}")
    check(t["decisions"].get("ENQUEUED", 0) == n - active, f"expected {n - active} ENQUEUED, got {t['decisions']}")
    check(t["decisions"].get("SKIPPED", 0) == active, f"expected {active} SKIPPED, got {t['decisions']}")
    with conn(dsn) as c:
        created, workers = c.execute(
            "SELECT count(*), count(DISTINCT worker_name) FROM scrinalia.archive_worker_runs "
            "WHERE trigger = 'SCHEDULE' AND status = 'QUEUED'"
        ).fetchone()
        check(created == n - active == workers, f"{created} SCHEDULE runs for {workers} workers, expected {n - active}")
        # after the tick's own now(): a long tick may commit after the next period began
        stale = c.execute(
            "SELECT count(*) FROM scrinalia.archive_worker_schedules WHERE next_run_at IS NULL OR next_run_at <= %s",
            (t["db_now"],),
        ).fetchone()[0]
        check(stale == 0, f"{stale} schedules were not advanced past the tick's now()")


def fingerprint(dsn: str) -> str:
    """What a tick wrote, independent of the instant: the SCHEDULE runs' content and the
    schedules' bookkeeping (the same for the tick and the floor, round after round)."""
    with conn(dsn) as c:
        return c.execute(
            "SELECT md5(coalesce((SELECT string_agg(concat_ws('|', worker_name, request, config, config_sources, "
            "attempt, requested_by, status), ',' ORDER BY worker_name) FROM scrinalia.archive_worker_runs "
            "WHERE trigger = 'SCHEDULE'), '') || coalesce((SELECT string_agg(concat_ws('|', worker_name, "
            "last_skip_reason, last_run_id IS NULL, arm_error), ',' ORDER BY worker_name) "
            "FROM scrinalia.archive_worker_schedules), ''))"
        ).fetchone()[0]


def verify_floor(dsn: str, n: int, active: int, f: dict) -> None:
    check(f["due"] == n, f"the floor's due query returned {f['due']} of {n}")
    check(f["written"] == n, f"the floor updated {f['written']} schedules of {n}")
    verify(dsn, n, active, {**f, "decisions": {"ENQUEUED": n - active, "SKIPPED": active}})


ORDERS = (("tick", "floor", "pass"), ("floor", "pass", "tick"), ("pass", "tick", "floor"))
# seconds clear of a minute boundary before the first pass (then twice the longest pass)
PASS_MARGIN = 10.0


def clear_of_a_minute_boundary(seconds: float) -> None:
    """Until the next minute boundary is at least `seconds` away. The pass decides its
    chunks in transactions of their own, each at its own now(): one that crossed a
    minute boundary would find a schedule it enqueued in an early chunk due again in a
    later one (its next occurrence passed meanwhile), and decide it twice. The tick and
    the floor decide at one now() and need no such care."""
    left = 60.0 - time.time() % 60.0
    if left < seconds:
        time.sleep(left + 0.5)


def measure(dsn: str, n: int, reps: int) -> dict:
    """`reps` rounds over n schedules, each timing the tick, the floor and the
    scheduler's pass on the same re-armed data (which goes first rotates); medians and
    spreads."""
    active = prepare(dsn, n)
    runs, floors, ratios, passes, pass_ratios = [], [], [], [], []
    for i in range(reps):
        got = {}
        for which in ORDERS[i % len(ORDERS)]:
            rearm(dsn)
            if which == "pass":
                clear_of_a_minute_boundary(2 * max(passes) if passes else PASS_MARGIN)
                t = pass_once(dsn)
                verify_pass(dsn, n, active, t)
                got[which] = (t, fingerprint(dsn))
                continue
            with conn(dsn, autocommit=True) as c:
                c.execute("SELECT 1")  # connected and warm before the clock starts
                if which == "tick":
                    t = tick_once(c)
                    verify(dsn, n, active, t)
                else:
                    t = floor_once(c)
                    verify_floor(dsn, n, active, t)
            got[which] = (t, fingerprint(dsn))
        (t, tick_fp), (f, floor_fp), (p, pass_fp) = got["tick"], got["floor"], got["pass"]
        check(tick_fp == floor_fp, "the floor did not write the same rows as the tick")
        check(pass_fp == tick_fp, "the scheduler's pass did not write the same rows as the tick")
        passes.append(p["pass"])
        t["sql"] = t["sql_due"] + t["sql_tick"] + t["commit"]
        runs.append(t)
        floors.append(f)
        ratios.append(t["sql"] / f["sql"])
        pass_ratios.append(p["pass"] / f["total"])
    pick = {k: median([r[k] for r in runs]) for k in ("total", "sql", "sql_due", "python", "sql_tick", "commit")}
    pick.update(
        n=n,
        reps=reps,
        active=active,
        pairs=runs[0]["pairs"],
        best=min(r["total"] for r in runs),
        worst=max(r["total"] for r in runs),
        all=runs,
        floor_total=median([f["total"] for f in floors]),
        floor_total_best=min(f["total"] for f in floors),
        floor_total_worst=max(f["total"] for f in floors),
        floor_python=median([f["python"] for f in floors]),
        pass_ratio=median(pass_ratios),
        pass_ratio_best=min(pass_ratios),
        pass_ratio_worst=max(pass_ratios),
        pass_ratios=pass_ratios,
        floor=median([f["sql"] for f in floors]),
        floor_best=min(f["sql"] for f in floors),
        floor_worst=max(f["sql"] for f in floors),
        floors=floors,
        ratio=median(ratios),
        ratio_best=min(ratios),
        ratio_worst=max(ratios),
        ratios=ratios,
        passes=passes,
        pass_median=median(passes),
        pass_best=min(passes),
        pass_worst=max(passes),
        sql_best=min(r["sql"] for r in runs),
        sql_worst=max(r["sql"] for r in runs),
    )
    return pick


def run(dsn: str, quick: bool = False) -> Result:
    # the scheduler's real pass within 1.5x a floor that includes the cron computation
    sizes = [1_000, 2_000] if quick else [10_000, 100_000]
    reps = 2 if quick else 5  # (on shared cores one round can land far from the others)
    # the pass runs in this process, so with its daemon's collector, as
    # scrinalia-scheduler does; the tick and the floor beside it get the same
    tune_for_daemon()
    figures = [measure(dsn, n, reps) for n in sizes]
    rows, met = [], True
    for f in figures:
        ok = f["pass_ratio"] <= 1.5
        met = met and ok
        rows.append(
            [
                f"{f['n']:,}",
                f"{f['pass_median']:.3f} s ({f['pass_best']:.3f}-{f['pass_worst']:.3f})",
                f"{f['floor_total']:.3f} s ({f['floor_total_best']:.3f}-{f['floor_total_worst']:.3f})",
                f"{f['floor_python']:.3f} s",
                f"{f['pass_ratio']:.2f}x ({f['pass_ratio_best']:.2f}-{f['pass_ratio_worst']:.2f})",
                f"{f['total']:.3f} s ({f['best']:.3f}-{f['worst']:.3f})",
                f"{f['sql']:.3f} s / {f['floor']:.3f} s = {f['ratio']:.2f}x",
                "<= 1.5x",
                "met" if ok else "NOT met",
            ]
        )
    return Result(
        key="tick",
        title="1. Tick: the scheduler's pass over N due schedules, against a floor that includes the cron computation",
        setup=[
            "N workers, each with a due schedule (next_run_at 1 s to 2 h in the past); "
            f"{len(seed.TEMPLATES)} cron templates x 60 minutes x {len(seed.ZONES)} zones "
            f"({', '.join(seed.ZONES)}); a QUEUED manual run on every other worker, so half "
            "of the decisions are SKIPPED and half ENQUEUED; a request on every fourth schedule. All workers "
            "share one catalogue (seed.py), so the config resolution, shared per distinct combination of "
            "catalogue, settings and request, does its work a few times per tick. The tick keeps the configs it "
            "resolves (schedule_configs) and copies them at the next ticks: the first round's first tick or pass "
            "resolves, the others copy; the floor copies its own from a table resolved beforehand.",
            f"The pass (the headline): the scheduler's own `Scheduler.tick()` over the N due schedules, as a "
            f"scheduler that has just taken the lock runs it (connected before the clock starts, croniter's parse "
            f"cache cleared): reaping and retries, then chunks of {DEFAULTS.tick_chunk:,} due schedules, each its "
            "own transaction with the lock checked between them, the tick checking every next instant against its "
            "cron, and every decision logged (plain lines, to /dev/null). Timed from the call to its return: every "
            "run committed and logged.",
            "The floor: the same rows by plain statements in one transaction, cron included: the due query of "
            "due_schedules() (row-locked, all rows fetched binary), `cron.next_occurrences()` over the due pairs (each "
            "distinct (cron, zone) once, parse cache cleared first), one statement (arrays binary): the INSERT ... "
            "SELECT of the runs (configs copied from a table resolved beforehand) with the UPDATE of the "
            "schedules, commit. No check of the "
            "instants, no lock check, no log.",
            "Beside them, the stripped tick: due_schedules(), the cron, one tick() over all N, commit, in one "
            "transaction; its SQL time against the floor's SQL time (without either's Python).",
            f"{reps} rounds; each times the pass, the floor and the tick on the same re-armed data (schedules back "
            "in the past, skip counts reset, created runs deleted, VACUUM ANALYZE), rotating which goes first; "
            "each pass starts at least twice the longest pass before a minute boundary (its chunks' now() must "
            "not pass a schedule's next occurrence). The ratio is pass / floor of the same round; medians and "
            "ranges.",
            "All three run in the benchmark's process, with the garbage collector scrinalia-scheduler runs with "
            "(scrinalia_workers.collector: start-up objects frozen, the youngest generation collected every "
            f"{YOUNG_THRESHOLD:,} allocations).",
            "Checked after each: N due, N/2 ENQUEUED, N/2 SKIPPED, N/2 SCHEDULE runs on distinct workers, every "
            "next_run_at after the transaction's now(), and the three wrote the same rows (a fingerprint of the "
            "runs' content and the schedules' bookkeeping).",
        ],
        headers=[
            "N",
            "scheduler pass (range)",
            "floor with cron (range)",
            "floor's cron",
            "pass / floor (range)",
            "stripped tick (range)",
            "tick SQL / floor SQL",
            "target",
            "verdict",
        ],
        rows=rows,
        target=(
            "the scheduler's pass within 1.5x the floor with its cron computation, at 10,000 and 100,000 due"
            if not quick
            else "quick mode: smoke sizes only"
        ),
        met=met,
        notes=[
            "Python cron: "
            + ", ".join(
                f"{f['python'] / f['pairs'] * 1e6:.0f} us per distinct (cron, zone) pair "
                f"({f['pairs']:,} pairs) at N={f['n']:,}"
                for f in figures
            )
            + "; next_occurrences() computes each distinct pair once.",
            f"The pass pays what the floor does not: a due query and a plan per chunk of {DEFAULTS.tick_chunk:,}, "
            "the lock check between chunks, the check of each next instant against its cron (bit masks per stored "
            "cron), one log line per decision (an enqueued run's catch_up field: one cron evaluation per "
            "(cron, zone) and missed window; none more for a pair whose first occurrence after the earliest "
            "instant its schedules waited for is still ahead, which is also its next occurrence).",
            "The floor is written for speed: its due rows fetched and its two arrays sent binary (as the pass "
            "does), and all its writes one statement (the INSERT ... SELECT of the runs and the UPDATE of the "
            "schedules in one WITH); what remains of its write is the rows' own cost (the foreign-key checks of "
            "each inserted run and the schedules' trigger, which any statement on these tables pays).",
        ],
        headline="; ".join(
            f"{f['n']:,} due: pass {f['pass_median']:.2f} s, {f['pass_ratio']:.2f}x the floor with cron "
            f"({f['floor_total']:.2f} s)"
            for f in figures
        ),
        data={"figures": figures},
    )
