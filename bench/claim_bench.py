"""Benchmark 3: claim, run an empty handler, finish; 4 runner connections.

N workers each hold one QUEUED run; K runners (processes or threads, one connection
each) loop on scrinalia.claim_next / scrinalia.finish exactly as a runner does,
until claim_next returns no row. Each runner records what it claimed: at the end
every run must be SUCCEEDED, claimed by exactly one runner, the one whose id the
row's lease_owner names, and no QUEUED or RUNNING row may be left.
"""

from __future__ import annotations

import multiprocessing
import threading
from collections import Counter

import psycopg

from . import seed
from .common import Result, check, conn, now, vacuum_analyze

CLAIM_SQL = "SELECT run_id, lease_token FROM scrinalia.claim_next(%s, %s::interval)"
FINISH_SQL = "SELECT status FROM scrinalia.finish(%s, %s, 'SUCCEEDED')"
RUNNER_LOGIN = "scrinalia_bench_runner"


def empty_handler(run_id: int) -> None:
    """The work: none, so that the figure is the protocol's own cost."""


def runner_dsn(dsn: str) -> tuple[str, str]:
    """A DSN logged in as a member of scrinalia_runner, as a real runner is (falls back
    to the given DSN when roles cannot be created there). Returns (dsn, who)."""
    try:
        with conn(dsn) as c:
            if not c.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (RUNNER_LOGIN,)).fetchone():
                c.execute(f'CREATE ROLE "{RUNNER_LOGIN}" LOGIN')
            c.execute(f'GRANT scrinalia_runner TO "{RUNNER_LOGIN}"')
    except psycopg.Error:
        return dsn, "the benchmark's own (superuser) login"
    return psycopg.conninfo.make_conninfo(dsn, user=RUNNER_LOGIN), f"login {RUNNER_LOGIN} (member of scrinalia_runner)"


def runner_loop(dsn: str, runner_id: str, start, results) -> None:
    """One runner: claim, run, finish until nothing is left; reports what it claimed."""
    try:
        with conn(dsn, name=f"bench-{runner_id}") as c:
            c.execute("SELECT 1")
            claimed = []
            start.wait()
            while True:
                row = c.execute(CLAIM_SQL, (runner_id, "5 minutes")).fetchone()
                if row is None:
                    break
                empty_handler(row[0])
                status = c.execute(FINISH_SQL, row).fetchone()[0]
                if status != "SUCCEEDED":
                    raise RuntimeError(f"finish of run #{row[0]} returned {status}")
                claimed.append(row[0])
        results.put((runner_id, claimed, None))
    except Exception as e:  # reported to the parent, which fails the benchmark
        results.put((runner_id, [], f"{type(e).__name__}: {e}"))


def prepare(dsn: str, n: int) -> None:
    with conn(dsn) as c:
        seed.reset(c)
        seed.workers(c, n)
        check(seed.queued_runs(c, n) == n, "seeding the queued runs failed")
    vacuum_analyze(dsn)


def run_once(dsn: str, n: int, k: int, mode: str) -> dict:
    """Seeds n queued runs, lets k runners drain them; returns throughput and checks."""
    prepare(dsn, n)
    rdsn, who = runner_dsn(dsn)
    if mode == "processes":
        ctx = multiprocessing.get_context("fork")  # children open their own connections
        start, results = ctx.Barrier(k + 1), ctx.Queue()
        spawn = lambda i: ctx.Process(target=runner_loop, args=(rdsn, f"bench-p{i}", start, results))  # noqa: E731
    else:
        import queue

        start, results = threading.Barrier(k + 1), queue.Queue()
        spawn = lambda i: threading.Thread(target=runner_loop, args=(rdsn, f"bench-t{i}", start, results))  # noqa: E731
    workers = [spawn(i) for i in range(k)]
    for w in workers:
        w.start()
    start.wait(timeout=60)
    t0 = now()
    reports = [results.get(timeout=600) for _ in range(k)]
    elapsed = now() - t0
    for w in workers:
        w.join(timeout=60)
    errors = [f"{r}: {e}" for r, _, e in reports if e]
    check(not errors, "runner failed: " + "; ".join(errors))

    claims = Counter(run_id for _, claimed, _ in reports for run_id in claimed)
    owner = {run_id: r for r, claimed, _ in reports for run_id in claimed}
    twice = sum(1 for c in claims.values() if c > 1)
    with conn(dsn) as c:
        states = dict(
            c.execute("SELECT status::text, count(*) FROM scrinalia.archive_worker_runs GROUP BY 1").fetchall()
        )
        owners = dict(c.execute("SELECT run_id, lease_owner FROM scrinalia.archive_worker_runs").fetchall())
        span = c.execute(
            "SELECT extract(epoch FROM max(finished_at) - min(started_at)) FROM scrinalia.archive_worker_runs"
        ).fetchone()[0]
    lost = n - len(claims)
    wrong_owner = sum(1 for run_id, r in owner.items() if owners.get(run_id) != r)
    check(twice == 0, f"{twice} runs were claimed twice")
    check(lost == 0 and sum(claims.values()) == n, f"{lost} runs were never claimed")
    check(states == {"SUCCEEDED": n}, f"ledger is {states}, expected {n} SUCCEEDED only")
    check(wrong_owner == 0, f"{wrong_owner} runs name another runner as their lease owner")
    return {
        "mode": mode,
        "n": n,
        "runners": k,
        "elapsed": elapsed,
        "rate": n / elapsed,
        "db_span": float(span),
        "per_runner": sorted(len(cl) for _, cl, _ in reports),
        "twice": twice,
        "lost": lost,
        "login": who,
    }


def data_disk() -> str:
    """What the throwaway cluster's directory (under the temp dir) is mounted on."""
    import tempfile

    try:
        best = ("", "?", "?")
        with open("/proc/mounts") as f:
            for line in f:
                dev, mnt, fs = line.split()[:3]
                if tempfile.gettempdir().startswith(mnt) and len(mnt) > len(best[0]):
                    best = (mnt, dev, fs)
        return f"{best[1]} ({best[2]}, mounted on {best[0]})"
    except OSError:
        return "an unknown disk"


def set_durability(admin_dsn: str, durable: bool) -> dict:
    """fsync/synchronous_commit/full_page_writes on (durable) or back to the cluster's
    file (the throwaway cluster's off); all three take effect on reload."""
    with conn(admin_dsn) as c:
        for name in ("fsync", "synchronous_commit", "full_page_writes"):
            c.execute(f"ALTER SYSTEM SET {name} = on" if durable else f"ALTER SYSTEM RESET {name}")
        c.execute("SELECT pg_reload_conf()")
        # the reload is asynchronous: wait until this backend sees it
        deadline = now() + 10
        want = "on" if durable else None
        while True:
            got = {n: c.execute(f"SHOW {n}").fetchone()[0] for n in ("fsync", "synchronous_commit", "full_page_writes")}
            if want is None or all(v == want for v in got.values()) or now() > deadline:
                return got
            c.execute("SELECT pg_sleep(0.05)")


def run(dsn: str, quick: bool = False, admin_dsn: str | None = None, durable: bool = False) -> Result:
    n = 2_000 if quick else 10_000
    k = 4
    variants = [("processes", False), ("threads", False)]
    if durable and admin_dsn:
        variants.append(("processes", True))
    figures = []
    for mode, dur in variants:
        settings = None
        if dur:
            settings = set_durability(admin_dsn, True)
        try:
            f = run_once(dsn, n, k, mode)
        finally:
            if dur:
                set_durability(admin_dsn, False)
        f["durable"] = dur
        f["settings"] = settings
        figures.append(f)
    rows, met = [], None
    for f in figures:
        ok = f["rate"] >= 2000
        if not f["durable"] and f["mode"] == "processes":
            met = ok
        rows.append(
            [
                f"{f['runners']} {f['mode']}",
                "fsync=on, synchronous_commit=on, full_page_writes=on"
                if f["durable"]
                else "fsync=off, synchronous_commit=off (throwaway cluster)",
                f"{f['n']:,}",
                f"{f['elapsed']:.2f} s",
                f"{f['rate']:,.0f}",
                f"{f['n'] / f['db_span']:,.0f}",
                "/".join(map(str, f["per_runner"])),
                str(f["twice"]),
                str(f["lost"]),
                ">= 2,000 runs/s" if not f["durable"] else "(for comparison)",
                ("met" if ok else "NOT met") if not f["durable"] else ("would meet" if ok else "below"),
            ]
        )
    by = {(f["mode"], f["durable"]): f for f in figures}
    notes = []
    if ("threads", False) in by:
        p, t = by[("processes", False)], by[("threads", False)]
        notes.append(
            f"Threads reach {t['rate'] / p['rate']:.0%} of processes: psycopg releases the GIL while it "
            "waits on the server, and on 2 cores the server's backends need the CPU as much as the runners."
        )
    if ("processes", True) in by:
        p, d = by[("processes", False)], by[("processes", True)]
        notes.append(
            f"Durable commits (fsync, synchronous_commit, full_page_writes on, switched on with ALTER SYSTEM "
            f"and reloaded for this run only; data directory on {data_disk()}) cost "
            f"{1 - d['rate'] / p['rate']:.0%} of the throughput: each run is two commits (claim, finish)."
        )
    return Result(
        key="claim",
        notes=notes,
        title="3. Claim, run (empty handler), finish",
        setup=[
            f"{n:,} workers, each with one QUEUED manual run; {k} runners, each with its own connection "
            f"({figures[0]['login']}), looping on `scrinalia.claim_next(runner, '5 minutes')`, an empty handler, "
            "`scrinalia.finish(run_id, lease_token, 'SUCCEEDED')` until claim_next returns no row "
            "(psycopg 3, autocommit, statements prepared automatically after 5 executions; no pipeline mode: "
            "a runner's finish depends on its claim).",
            "Runs/s = N / wall time from the start barrier to the last runner's report; also N / (last finished_at "
            "- first started_at) from the ledger.",
            "Checked at the end: each run claimed by exactly one runner (the one its lease_owner names), "
            "all N SUCCEEDED, no QUEUED or RUNNING row left.",
        ],
        headers=[
            "runners",
            "durability",
            "runs",
            "wall",
            "runs/s",
            "runs/s (ledger)",
            "per runner",
            "claimed twice",
            "lost",
            "target",
            "verdict",
        ],
        rows=rows,
        target=">= 2,000 runs/s with 4 runner connections, zero double claims, zero lost",
        met=met,
        headline="; ".join(
            f"{f['rate']:,.0f} runs/s ({f['mode']}{', durable' if f['durable'] else ''})" for f in figures
        )
        + f"; double claims {sum(f['twice'] for f in figures)}, "
        f"lost {sum(f['lost'] for f in figures)}",
        data={"figures": figures},
    )
