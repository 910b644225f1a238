"""Claim-run-finish as a user sees it: N jobs become visible in one commit of the
system's own enqueue API while four workers of each system wait, idle, for work; the
figure is N / the time from that commit until the database says all N are done
(polled every 10 ms). Every system is timed the same way, its workers already started
and connected, so no start-up is counted; rounds are interleaved (each round runs
every system once, the order rotated) so that the noise of 2 shared cores falls on
all of them alike.

Systems (the peers' drains are bench/peers_drain.py):
- ours: 4 real `scrinalia-runner` processes (RUNNER_ARGS, heartbeats, JSON log lines
  to a file), handlers bench.any_handlers (an empty "*" handler), the runs enqueued
  through ours_enqueue();
- ours, one at a time: the same processes with --batch 1;
- bare statements: 4 processes looping on the claim and finish statements of
  sql/31_claim.sql and sql/34_outcomes.sql written out without their PL/pgSQL wrappers (one run at a time,
  prepared), the floor issue 12 compares the runner with; and the same statements
  32 runs a claim, as the runner's batches (no handler thread, no log, no heartbeat);
- graphile-worker, pgqueuer, procrastinate: each at its documented best and at its
  defaults (bench/peers.py, bench/peers_graphile.py).
"""

from __future__ import annotations

import multiprocessing
import tempfile
from pathlib import Path

import psycopg

from scrinalia_workers.testkit.procs import Procs

from . import machine, peers, peers_drain, peers_graphile, seed
from .common import check, child_env, conn, median, vacuum_analyze
from .drain_timing import await_sessions, sigterm_interrupts, timed_drain
from .peers import N_WORKERS

# Is a job still waiting or running? Each reads its system's live jobs only: our and
# procrastinate's partial indexes, pgqueuer's table (it deletes a finished job).
OURS_LIVE = "SELECT EXISTS (SELECT FROM scrinalia.archive_worker_runs WHERE status IN ('QUEUED', 'RUNNING'))"

# The statements of claim_runs() and finish_runs() for SUCCEEDED runs, without the
# functions around them (no runner check, no array checks, no lost-lease answer).
BARE_CLAIM = """
WITH c AS (
    SELECT r.run_id FROM scrinalia.archive_worker_runs r
     WHERE r.status = 'QUEUED' AND (r.not_before IS NULL OR r.not_before <= now())
     ORDER BY r.created_at, r.run_id LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
UPDATE scrinalia.archive_worker_runs r
   SET status = 'RUNNING', lease_owner = %(runner)s, lease_token = gen_random_uuid(),
       lease_duration = %(lease)s::interval, lease_expires_at = now() + %(lease)s::interval,
       heartbeat_at = now(), started_at = now()
  FROM c WHERE r.run_id = c.run_id
RETURNING r.run_id, r.lease_token"""
BARE_FINISH = """
UPDATE scrinalia.archive_worker_runs r
   SET status = 'SUCCEEDED', finished_at = now(), duration = now() - r.started_at,
       lease_token = NULL, lease_expires_at = NULL, error = NULL, error_fingerprint = NULL,
       retry_pending = false
  FROM unnest(%s::bigint[], %s::uuid[]) AS i(run_id, lease_token)
 WHERE r.run_id = i.run_id AND r.status = 'RUNNING' AND r.lease_token = i.lease_token
   AND r.lease_expires_at > now()
RETURNING r.run_id"""


# --- ours: the real runner processes ----------------------------------------------


# The runner's arguments in every drain of ours (its throughput settings go here).
RUNNER_ARGS: list[str] = []
ENQUEUE = "SELECT run_id FROM scrinalia.enqueue(%s, '{}'::jsonb, 'MANUAL', 'bench')"
ENQUEUE_RUNS = "SELECT count(*) FROM scrinalia.enqueue_runs(%s::text[], NULL, 'MANUAL', 'bench')"


def has_enqueue_runs(c: psycopg.Connection) -> bool:
    return c.execute("SELECT to_regproc('scrinalia.enqueue_runs') IS NOT NULL").fetchone()[0]


def ours_enqueue(c: psycopg.Connection, names: list[str]) -> None:
    """One run for each worker through our public API, in one transaction:
    scrinalia.enqueue_runs() where the schema has it, else enqueue() for each
    (pipelined); each sends its NOTIFY at the commit."""
    with c.transaction():
        if has_enqueue_runs(c):
            got = c.execute(ENQUEUE_RUNS, (names,)).fetchone()[0]
            check(got == len(names), f"ours: enqueue_runs() returned {got} runs, expected {len(names)}")
        else:
            with c.pipeline():
                for w in names:
                    c.execute(ENQUEUE, (w,))


def _ours_fill(n: int):
    names = [seed.worker_name(i) for i in range(n)]
    return lambda c: ours_enqueue(c, names)


def _bare_fill(n: int):
    def fill(c: psycopg.Connection) -> None:
        with c.transaction():
            seed.queued_runs(c, n)

    return fill


def _ours_prepare(dsn: str, n: int, history_upto: int | None = None) -> None:
    """An empty ledger and n workers; or, with history_upto, the ledger's history kept
    (the runs up to that id) and the previous round's runs deleted."""
    with conn(dsn) as c:
        if history_upto is None:
            seed.reset(c)
            seed.workers(c, n)
        else:
            c.execute("DELETE FROM scrinalia.archive_worker_runs WHERE run_id > %s", (history_upto,))
    vacuum_analyze(dsn, *(["scrinalia.archive_worker_runs"] if history_upto is not None else []))


def history_system(history: int, layout: str = "use") -> str:
    """The name of a history drain among run()'s systems (layout: bench.seed.history)."""
    return f"ours, {history:,} finished runs in the ledger" + ("" if layout == "use" else f", {layout}")


def history_prepare(dsn: str, n: int, history: int, layout: str = "use") -> int:
    """n workers and `history` finished runs (bench.seed.history, in that layout);
    returns the last history run id, below every run the drains add."""
    with conn(dsn) as c:
        seed.reset(c)
        seed.workers(c, n)
        seed.history(c, history, n, layout)
        upto = c.execute("SELECT max(run_id) FROM scrinalia.archive_worker_runs").fetchone()[0]
    vacuum_analyze(dsn)
    return upto


def _ours_check(dsn: str, n: int, history_upto: int | None = None) -> dict:
    since = history_upto or 0
    with conn(dsn) as c:
        states = dict(
            c.execute(
                "SELECT status::text, count(*) FROM scrinalia.archive_worker_runs WHERE run_id > %s GROUP BY 1",
                (since,),
            ).fetchall()
        )
        owners, pages = c.execute(
            "SELECT count(DISTINCT lease_owner), count(DISTINCT (ctid::text::point)[0])"
            " FROM scrinalia.archive_worker_runs WHERE run_id > %s",
            (since,),
        ).fetchone()
    check(states == {"SUCCEEDED": n}, f"ours: the drained runs are {states}, expected {n} SUCCEEDED")
    # pages: how many heap pages the drained runs' final versions ended on
    return {"owners": owners, "pages": pages}


def runner_drain(dsn: str, n: int, batch: int | None, logdir: Path, history_upto: int | None = None) -> dict:
    """n runs drained by N_WORKERS scrinalia-runner processes (--batch batch); with
    history_upto, on a ledger that keeps its history (history_prepare)."""
    _ours_prepare(dsn, n, history_upto)
    since = history_upto or 0
    extra = RUNNER_ARGS + ([] if batch is None else ["--batch", str(batch)])
    with Procs() as procs:
        for i in range(N_WORKERS):
            procs.runner(
                dsn,
                "bench.any_handlers",
                "--runner-id",
                f"bench-{i}",
                *extra,
                log=logdir / f"runner-{batch}-{i}.log",
                env=child_env(),
                new_session=True,
            )
        await_sessions(
            dsn,
            "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'scrinalia-runner bench-%' "
            "AND state = 'idle' AND query LIKE '%next_claimable_at%'",
            N_WORKERS,
            "ours",
            watch=procs.started,
        )
        d = timed_drain(
            dsn,
            _ours_fill(n),
            OURS_LIVE,
            f"SELECT count(*) = {int(n)} FROM scrinalia.archive_worker_runs"
            f" WHERE run_id > {int(since)} AND status = 'SUCCEEDED'",
            lambda: all(p.running() for p in procs.started),
        )
        codes = procs.stop_all(timeout=30)
    check(all(c == 0 for c in codes), f"ours: runner exit codes {codes}")
    return {**d.figures(n), **_ours_check(dsn, n, history_upto)}


def _bare_worker(dsn: str, i: int, ready, go, batch: int) -> None:
    with psycopg.connect(dsn, autocommit=True, prepare_threshold=0, application_name=f"bench-bare-{i}") as c:
        c.execute("LISTEN scrinalia_runs")
        ready.set()
        go.wait()
        args = {"runner": f"bare-{i}", "lease": "5 minutes", "limit": batch}
        while True:
            rows = c.execute(BARE_CLAIM, args).fetchall()
            if not rows:
                return
            done = c.execute(BARE_FINISH, ([r[0] for r in rows], [r[1] for r in rows])).fetchall()
            check(len(done) == len(rows), "bare: a finish did not land")


def bare_drain(dsn: str, n: int, batch: int = 1) -> dict:
    """The bare statements, `batch` runs a claim: the workers are released by an Event
    set right after the commit (they would poll otherwise): the same start as a NOTIFY,
    without its cost."""
    _ours_prepare(dsn, n)
    ctx = multiprocessing.get_context("fork")
    go = ctx.Event()
    readies = [ctx.Event() for _ in range(N_WORKERS)]
    procs = [ctx.Process(target=_bare_worker, args=(dsn, i, readies[i], go, batch)) for i in range(N_WORKERS)]
    for p in procs:
        p.start()
    for r in readies:
        check(r.wait(60), "bare: a worker did not connect")

    def fill(c):
        _bare_fill(n)(c)
        go.set()

    d = timed_drain(
        dsn,
        fill,
        OURS_LIVE,
        f"SELECT count(*) = {int(n)} FROM scrinalia.archive_worker_runs WHERE status = 'SUCCEEDED'",
        lambda: True,
    )
    for p in procs:
        p.join(timeout=60)
    check(all(p.exitcode == 0 for p in procs), f"bare: exit codes {[p.exitcode for p in procs]}")
    return {**d.figures(n), **_ours_check(dsn, n)}


# --- the rounds -------------------------------------------------------------------


def systems(dsns: dict[str, str], n: int, versions: dict, history: int, logdir) -> dict:
    """name -> a drain (a callable returning its figures) for every system this machine
    can run; logdir() is the rounds' temporary folder."""
    out = {"ours": lambda: runner_drain(dsns["ours"], n, None, logdir())}
    if history:  # next to the empty ledger's drain in every round
        for layout, key in (("use", "history"), ("dense", "history dense")):
            upto = history_prepare(dsns[key], n, history, layout)
            out[history_system(history, layout)] = lambda key=key, upto=upto: runner_drain(
                dsns[key], n, None, logdir(), history_upto=upto
            )
    out.update(
        {
            "ours --batch 1": lambda: runner_drain(dsns["ours"], n, 1, logdir()),
            "bare statements": lambda: bare_drain(dsns["ours"], n),
            "bare statements, batched": lambda: bare_drain(dsns["ours"], n, batch=32),
        }
    )
    if versions.get("graphile-worker") and "graphile-worker" in dsns:
        peers_graphile.install(dsns["graphile-worker"])
        for config in peers_graphile.CONFIGS:
            out[f"graphile-worker, {config}"] = lambda config=config: peers_drain.graphile_drain(
                dsns["graphile-worker"], n, config, logdir()
            )
    if peers.pgqueuer_configs(versions):
        peers.pgqueuer_install(dsns["pgqueuer"])
        for config in peers.pgqueuer_configs(versions):
            out[f"pgqueuer, {config}"] = lambda config=config: peers_drain.pgqueuer_drain(dsns["pgqueuer"], n, config)
    if versions.get("procrastinate"):
        peers.procrastinate_install(dsns["procrastinate"])
        for config in peers.PROCRASTINATE:
            out[f"procrastinate, {config}"] = lambda config=config: peers_drain.procrastinate_drain(
                dsns["procrastinate"], n, config
            )
    return out


def run(
    dsns: dict[str, str],
    n: int,
    rounds: int,
    versions: dict,
    history: int = 0,
    only: list[str] | None = None,
    quiet: bool = False,
) -> dict:
    """dsns: ours, graphile-worker, pgqueuer, procrastinate (a database each), and when
    history > 0 "history" and "history dense": ours again on a ledger that holds that
    many finished runs, laid out as use leaves them and packed (bench.seed.history).
    only: these systems alone. quiet: each drain waits for the machine's load to settle
    first (machine.await_quiet: the drain before it counts in the load). Returns
    {system: {"rates": [...], "median": .., "min": .., "max": .., "enqueue": [seconds,
    ...], "pages": [...], "load": [...], "wal": [...], "checkpoints": [...]}} (pages:
    ours only, the heap pages of the drained runs, per round; load: the 1-minute load
    average as each drain started; wal, checkpoints: timed_drain's)."""
    with sigterm_interrupts(), tempfile.TemporaryDirectory(prefix="scrinalia-drain-") as tmp:
        drains = systems(dsns, n, versions, history if only is None else 0, lambda: Path(tmp))
        names = [k for k in drains if only is None or k in only]
        out: dict = {
            name: {"rates": [], "pages": [], "enqueue": [], "load": [], "wal": [], "checkpoints": []} for name in names
        }
        for r in range(rounds):
            # each round starts at a different system: whatever the one before leaves
            # (autovacuum, a checkpoint, cold caches) does not always fall on the same one
            k = r * len(names) // rounds
            for name in names[k:] + names[:k]:
                # the 1-minute load as it starts
                out[name]["load"].append(machine.await_quiet() if quiet else machine.load())
                got = drains[name]()
                print(f"  round {r + 1}/{rounds}: {name}: {got['rate']:,.0f} jobs/s", flush=True)
                out[name]["rates"].append(got["rate"])
                for key in ("pages", "enqueue", "wal", "checkpoints"):
                    if key in got:
                        out[name][key].append(got[key])
    for f in out.values():
        f.update(median=median(f["rates"]), min=min(f["rates"]), max=max(f["rates"]))
    return out
