"""Benchmark 10's prune: prune_runs() removing the oldest history of a large ledger
while two loops on their own connections time their statements, one claiming and
finishing runs with the runner's statements, one ticking a few schedules."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

import psycopg
from psycopg.rows import dict_row

from scrinalia_workers import cron
from scrinalia_workers.gateway.statements import runner as runner_sql

from . import drain_bench, seed, tick_bench
from .common import check, conn, now, percentile, verdict

RUNS = "scrinalia.archive_worker_runs"
SCHEDULES = "scrinalia.archive_worker_schedules"

PRUNE_BATCH = 10_000  # prune_runs()'s own default batch
PRUNE_TARGET = 50_000  # runs/s
WAIT_TARGET = 0.1  # seconds, the worst claim, finish or tick statement during the prune
CLAIM_BATCH = 10  # runs a claim in the claiming loop
REFILL = 5_000  # runs the claiming loop queues when it finds none (a short call, not timed)
TICK_WORKERS = 10  # due schedules each turn of the ticking loop
LOOPS_ALONE = 3.0  # seconds the two loops run before the prune starts: their latency alone
LEASE = timedelta(minutes=5)
# How often the sampler looks at what the loops' sessions wait on: a wait of 100 ms shows
# in about ten samples in a row, and a look costs the server well under a millisecond.
SAMPLE_EVERY = 0.010

# The instant the prune's cut-off is: the finish of the first run it must keep (a
# block of ten shares its instants, so the cut falls between whole chains).
CUTOFF_SQL = f"SELECT finished_at FROM {RUNS} WHERE run_id = %s"
# prune_runs() takes an age: computed from the call's own now(), the cut-off is exact.
PRUNE_SQL = "SELECT scrinalia.prune_runs(now() - %s::timestamptz, %s)"
OLDER_LEFT_SQL = f"SELECT count(*) FROM {RUNS} WHERE finished_at < %s"
# The ticking loop's schedules, due again before each of its turns (their runs of the
# last turn removed, so that each turn enqueues).
REARM_FEW_SQL = f"""
WITH gone AS (
    DELETE FROM {RUNS} WHERE worker_name = ANY (%(workers)s) AND trigger = 'SCHEDULE' AND status = 'QUEUED'
)
UPDATE {SCHEDULES} SET enabled = true, next_run_at = now() - interval '1 minute'
 WHERE worker_name = ANY (%(workers)s)
"""
SUCCEEDED = "SUCCEEDED"
# What each loop's session waits on while one of its statements runs: no wait event is
# the CPU (or the run queue of a busy machine); Lock is a row, transaction or table lock
# another session holds; LWLock, IO, BufferPin and the rest the server's own.
WAITS_SQL = """
SELECT application_name, coalesce(wait_event_type, 'CPU') AS waits_on, wait_event
  FROM pg_catalog.pg_stat_activity
 WHERE application_name = ANY (%s) AND state = 'active'
"""


def session_name(loop: str) -> str:
    """The application_name of a loop's connection, by which the sampler finds it."""
    return f"scrinalia-bench-{loop}"


class Loop(threading.Thread):
    """A loop on its own connection that times each of its statements: (start, seconds, what)."""

    def __init__(self, dsn: str, name: str):
        super().__init__(name=name, daemon=True)
        self.dsn = dsn
        self.stop = threading.Event()
        self.times: list[tuple[float, float, str]] = []
        self.error: BaseException | None = None
        self.warm = threading.Event()

    def timed(self, what: str, fn):
        t0 = now()
        out = fn()
        self.times.append((t0, now() - t0, what))
        return out

    def run(self) -> None:
        try:
            with conn(self.dsn, name=session_name(self.name)) as c:
                self.turn(c)  # its plans made and its caches warm before any figure
                self.times.clear()
                self.warm.set()
                while not self.stop.is_set():
                    self.turn(c)
        except BaseException as e:  # reported by the prune, which checks the loops
            self.error = e
            self.warm.set()

    def turn(self, c: psycopg.Connection) -> None:
        raise NotImplementedError

    def window(self, start: float, end: float) -> dict:
        """Of the statements that overlapped [start, end]: the slowest (seconds, which),
        the 99th percentile and how many."""
        during = [(t, what) for t0, t, what in self.times if t0 < end and t0 + t > start]
        if not during:
            return {"worst": 0.0, "what": "-", "p99": 0.0, "count": 0}
        t, what = max(during)
        return {"worst": t, "what": what, "p99": percentile([x for x, _ in during], 99), "count": len(during)}


class ClaimLoop(Loop):
    """Claims and finishes runs with the runner's statements (claim_runs, finish_runs);
    when the queue is empty, enqueues the next REFILL of its workers (not timed: their
    slots are free again, every run it claimed being finished in the same turn)."""

    def __init__(self, dsn: str, workers: list[str]):
        super().__init__(dsn, "claims")
        self.workers = workers
        self.finished = 0
        self.next = 0

    def refill(self, c: psycopg.Connection) -> None:
        batch = self.workers[self.next : self.next + REFILL]
        self.next = (self.next + REFILL) % len(self.workers)
        c.execute(drain_bench.ENQUEUE_RUNS, (batch,))

    def turn(self, c: psycopg.Connection) -> None:
        cur = c.cursor(row_factory=dict_row, binary=True)
        claimed = self.timed(
            "claim_runs",
            lambda: cur.execute(runner_sql.CLAIM_RUNS, ("bench-scale", LEASE, None, CLAIM_BATCH)).fetchall(),
        )
        if not claimed:
            self.refill(c)
            return
        ids = [r["run_id"] for r in claimed]
        tokens = [r["lease_token"] for r in claimed]
        done = self.timed(
            "finish_runs",
            lambda: c.execute(runner_sql.FINISH_RUNS, (ids, tokens, [SUCCEEDED] * len(ids), None, None)).fetchall(),
        )
        check(all(lost is None for _, _, lost in done), "the claiming loop lost a lease")
        self.finished += len(done)


class TickLoop(Loop):
    """The scheduler's tick statements (tick_bench.tick_once's) over a few schedules due
    again before each turn (not timed)."""

    def __init__(self, dsn: str, workers: list[str]):
        super().__init__(dsn, "ticks")
        self.workers = workers
        self.decided = 0

    def turn(self, c: psycopg.Connection) -> None:
        c.execute(REARM_FEW_SQL, {"workers": self.workers})
        cur = c.cursor(binary=True)
        with c.transaction():
            due = self.timed("due_schedules", lambda: cur.execute(tick_bench.DUE_SQL).fetchall())
            nexts = cron.next_occurrences([(r[1], r[2]) for r in due], after=due[0][4]) if due else []
            decided = self.timed(
                "tick", lambda: cur.execute(tick_bench.TICK_SQL, ([r[0] for r in due], nexts)).fetchall()
            )
            t0 = now()
        self.times.append((t0, now() - t0, "commit"))
        check(len(decided) == len(self.workers), f"the ticking loop decided {len(decided)} of {len(self.workers)}")
        self.decided += len(decided)


class WaitSampler(threading.Thread):
    """Samples, every SAMPLE_EVERY, what the loops' sessions wait on while a statement of
    theirs runs: (instant, loop, waits_on, event). Whether a slow statement during the
    prune waited on the prune's locks or only shared the CPU with it."""

    def __init__(self, dsn: str, loops: list[Loop]):
        super().__init__(name="waits", daemon=True)
        self.dsn = dsn
        self.sessions = {session_name(loop.name): loop.name for loop in loops}
        self.stop = threading.Event()
        self.samples: list[tuple[float, str, str, str | None]] = []
        self.looks: list[float] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with conn(self.dsn, name="scrinalia-bench-waits") as c:
                while not self.stop.is_set():
                    t = now()
                    for app, waits_on, event in c.execute(WAITS_SQL, (list(self.sessions),)).fetchall():
                        self.samples.append((t, self.sessions[app], waits_on, event))
                    self.looks.append(t)
                    self.stop.wait(SAMPLE_EVERY)
        except BaseException as e:  # reported by the prune, which checks the sampler
            self.error = e

    def window(self, loop: str, start: float, end: float) -> dict:
        """The loop's samples within [start, end]: how many, by what they waited on
        (Lock with its event), and the longest Lock wait seen: the time between the
        first and the last look of a run of consecutive looks that all found the
        session waiting on a lock (0 for a wait seen once)."""
        looks = [t for t in self.looks if start <= t <= end]
        mine = {t: (w, e) for t, name, w, e in self.samples if name == loop and start <= t <= end}
        kinds: dict[str, int] = {}
        for w, e in mine.values():
            key = f"Lock:{e}" if w == "Lock" else w
            kinds[key] = kinds.get(key, 0) + 1
        longest, since = 0.0, None
        for t in looks:
            locked = t in mine and mine[t][0] == "Lock"
            if locked and since is None:
                since = t
            if locked:
                longest = max(longest, t - since)
            else:
                since = None
        return {"looks": len(looks), "samples": len(mine), "kinds": kinds, "longest_lock": longest}


def cutoff(dsn: str, first: int, pruned: int) -> datetime:
    with conn(dsn) as c:
        return c.execute(CUTOFF_SQL, (first + pruned,)).fetchone()[0]


def prune(dsn: str, workers: int, pruned: int, first: int) -> dict:
    """prune_runs() in batches until it removes nothing, the oldest `pruned` runs (from
    run `first`) being the only ones older than its cut-off; the two loops running
    throughout, on `workers` workers whose schedules are none due."""
    cut = cutoff(dsn, first, pruned)
    claimers = [seed.worker_name(i) for i in range(TICK_WORKERS, workers)]
    loops = [ClaimLoop(dsn, claimers), TickLoop(dsn, [seed.worker_name(i) for i in range(TICK_WORKERS)])]
    sampler = WaitSampler(dsn, loops)
    for loop in loops:
        loop.start()
    calls = 0
    try:
        for loop in loops:
            check(loop.warm.wait(60), f"the {loop.name} loop did not start")
        sampler.start()
        alone = now()
        threading.Event().wait(LOOPS_ALONE)
        removed, t0 = 0, now()
        with conn(dsn, name="scrinalia-bench-prune") as c:
            while (n := c.execute(PRUNE_SQL, (cut, PRUNE_BATCH)).fetchone()[0]) > 0:
                removed += n
                calls += 1
        t1 = now()
    finally:
        for thread in (*loops, sampler):
            thread.stop.set()
        for thread in (*loops, sampler):
            if thread.is_alive():
                thread.join(timeout=60)
    for loop in loops:
        check(loop.error is None, f"the {loop.name} loop failed: {loop.error!r}")
    check(sampler.error is None, f"the wait sampler failed: {sampler.error!r}")
    with conn(dsn) as c:
        left = c.execute(OLDER_LEFT_SQL, (cut,)).fetchone()[0]
    check(removed == pruned, f"prune_runs removed {removed:,} runs, expected {pruned:,}")
    check(left == 0, f"{left} runs older than the cut-off are left")
    return {
        "removed": removed,
        "seconds": t1 - t0,
        "rate": removed / (t1 - t0),
        "calls": calls,
        "cutoff": cut,
        "loops": {
            loop.name: {
                "during": loop.window(t0, t1),
                "alone": loop.window(alone, t0),
                "waits_during": sampler.window(loop.name, t0, t1),
                "waits_alone": sampler.window(loop.name, alone, t0),
                "all": loop.times,
            }
            for loop in loops
        },
        "finished": loops[0].finished,
        "decided": loops[1].decided,
    }


def waits_text(w: dict) -> str:
    """A loop's wait samples: how many, the share of each kind, the longest lock wait."""
    if not w["samples"]:
        return f"no statement running at any of {w['looks']:,} looks"
    kinds = ", ".join(f"{kind} {n / w['samples']:.0%}" for kind, n in sorted(w["kinds"].items(), key=lambda kv: -kv[1]))
    return f"{w['samples']:,} samples: {kinds}; longest lock wait seen {w['longest_lock'] * 1000:.0f} ms"


def report_rows(p: dict) -> tuple[list[list[str]], list[bool], list[str]]:
    """Benchmark 10's rows of a prune (prune()'s answer), their verdicts and the
    headline's parts."""
    rows: list[list[str]] = []
    verdicts: list[bool] = []
    heads: list[str] = []
    ok = p["rate"] >= PRUNE_TARGET
    verdicts.append(ok)
    rows.append(
        [
            f"5. prune_runs, {p['removed']:,} runs in batches of {PRUNE_BATCH:,}",
            "-",
            f"{p['rate']:,.0f} runs/s ({p['seconds']:.1f} s, {p['calls']} calls)",
            "-",
            f">= {PRUNE_TARGET:,} runs/s",
            verdict(ok),
        ]
    )
    heads.append(f"prune {p['rate']:,.0f} runs/s")
    for name, what in (("claims", "claim_runs/finish_runs"), ("ticks", "due_schedules/tick/commit")):
        during, alone = p["loops"][name]["during"], p["loops"][name]["alone"]
        worst = during["worst"]
        ok = during["count"] > 0 and worst <= WAIT_TARGET
        verdicts.append(ok)
        rows.append(
            [
                f"5. during the prune: worst {what} statement (p99)",
                f"the loops alone, before it: {alone['worst'] * 1000:.1f} ms ({alone['what']}; p99 "
                f"{alone['p99'] * 1000:.1f} ms, {alone['count']:,} statements)",
                f"{worst * 1000:.1f} ms ({during['what']}; p99 {during['p99'] * 1000:.1f} ms, "
                f"{during['count']:,} statements)",
                "-",
                f"<= {WAIT_TARGET * 1000:.0f} ms",
                verdict(ok),
            ]
        )
        heads.append(f"worst {name[:-1]} {worst * 1000:.0f} ms")
        waits = p["loops"][name]["waits_during"]
        ok = waits["samples"] > 0 and waits["longest_lock"] < WAIT_TARGET
        verdicts.append(ok)
        rows.append(
            [
                f"5. during the prune: what the {what} statements waited on",
                f"the loops alone, before it: {waits_text(p['loops'][name]['waits_alone'])}",
                waits_text(waits),
                "-",
                f"no lock wait of {WAIT_TARGET * 1000:.0f} ms",
                verdict(ok),
            ]
        )
    return rows, verdicts, heads
