"""Benchmark 4: lateness, measured against real processes.

a. The scheduler (`python -m scrinalia_workers.scheduler --dsn ... --json`) with 200
   schedules due at the same minute: run.created_at - run.scheduled_for per run.
   Full mode waits for real minute boundaries (`* * * * *`, armed by the scheduler
   itself); --quick moves next_run_at two seconds ahead instead and NOTIFYs the
   scheduler (the clock is data).
b. An idle runner woken by NOTIFY: run.started_at - run.created_at for runs enqueued
   one at a time, the runner idle in between. Both timestamps are the database's
   now(), so no clock is compared with another machine's.
"""

from __future__ import annotations

import importlib.util
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

import psycopg

from scrinalia_workers.testkit.procs import Proc, Procs
from scrinalia_workers.testkit.waiting import wait_for

from . import pgcron, seed
from .common import Result, check, child_env, conn, percentile
from .lateness_report import row, scheduler_rows

N_SCHEDULES = 200
POLL = 0.02  # how often a wait for the processes' work looks
ALONE_MINUTES = 3  # after the shared minutes, ours with pg_cron's jobs unscheduled


def scheduler_available() -> bool:
    return importlib.util.find_spec("scrinalia_workers.scheduler") is not None


def runner_command(dsn: str) -> tuple[list[str], str]:
    """The reference runner with an empty handler; the bench's own loop where it is missing."""
    if importlib.util.find_spec("scrinalia_workers.runner") is not None:
        return (
            [
                "-m",
                "scrinalia_workers.runner",
                "--dsn",
                dsn,
                "--handlers",
                "bench.empty_handlers",
                "--runner-id",
                "bench-runner",
                "--json",
            ],
            "the reference runner (`python -m scrinalia_workers.runner --handlers bench.empty_handlers`, "
            "one handler for every worker that does nothing)",
        )
    return (
        ["-m", "bench.notify_runner", "--dsn", dsn, "--runner-id", "bench-notify"],
        "bench/notify_runner.py, a minimal LISTEN-woken claim loop mirroring the reference runner",
    )


class Listener:
    """One connection LISTENing in the benchmark's database, in a thread of its own. NOTIFY
    is delivered when its transaction commits, so a notification's arrival (time.time() on
    this machine, the server's clock too) is when that transaction became visible to a client."""

    def __init__(self, dsn: str, channels: tuple[str, ...]):
        self.got: list[tuple[float, str, str]] = []  # (arrival epoch, channel, payload)
        self.stop = threading.Event()
        self.c = conn(dsn, name="scrinalia-bench-listener")
        for ch in channels:
            self.c.execute(f"LISTEN {ch}")
        self.thread = threading.Thread(target=self._loop, name="bench-listener", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self.stop.is_set():
            for n in self.c.notifies(timeout=0.2):
                self.got.append((time.time(), n.channel, n.payload))

    def between(self, channel: str, t0: float, t1: float) -> list[tuple[float, str]]:
        return [(t, p) for t, ch, p in list(self.got) if ch == channel and t0 <= t < t1]

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        self.c.close()


def _epoch(c, ts) -> float:
    return c.execute("SELECT extract(epoch FROM %s::timestamptz)::float8", (ts,)).fetchone()[0]


def _commit_timestamps_on(dsn: str) -> bool:
    with conn(dsn) as c:
        return c.execute("SELECT current_setting('track_commit_timestamp') = 'on'").fetchone()[0]


def _commit_lateness(c, due) -> list[float]:
    """Per SCHEDULE run of the period `due`: its commit (when a client can first see it)
    minus the instant it was due, from the row's own xmin."""
    return c.execute(
        "SELECT coalesce(array_agg(extract(epoch FROM pg_xact_commit_timestamp(xmin) - scheduled_for)::float8), "
        "'{}') FROM scrinalia.archive_worker_runs WHERE trigger = 'SCHEDULE' AND scheduled_for = %s",
        (due,),
    ).fetchone()[0]


def _pgcron_commit_lateness(c, due) -> list[float]:
    """The same for pg_cron's job runs of that minute (one row each, see bench/pgcron.py)."""
    lat, twice = c.execute(
        f"SELECT coalesce(array_agg(extract(epoch FROM pg_xact_commit_timestamp(xmin) - scheduled_for)::float8), "
        f"'{{}}'), count(*) - count(DISTINCT job) FROM public.{pgcron.TABLE} WHERE scheduled_for = %s",
        (due,),
    ).fetchone()
    check(twice == 0, f"pg_cron ran {twice} jobs twice in one minute")
    return lat


def spike(c, n: int, commit_ts: bool, proc: Proc) -> dict:
    """n more schedules all due at one instant a few seconds ahead (the clock is data):
    when is the last of their runs visible? The scheduler wakes by itself (next_wakeup)."""
    c.execute(
        "INSERT INTO scrinalia.archive_workers (worker_name, default_config) "
        "SELECT format('spike%%s', lpad(i::text, 6, '0')), %s::jsonb FROM generate_series(0, %s - 1) i",
        (seed.DEFAULT_CONFIG, n),
    )
    # yearly: after the spike none of them is due again during the benchmark
    c.execute(
        "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone, next_run_at) "
        "SELECT worker_name, '0 0 1 1 *', 'UTC', date_trunc('second', now()) + interval '4 seconds' "
        "FROM scrinalia.archive_workers WHERE worker_name LIKE 'spike%%'"
    )
    c.execute("VACUUM ANALYZE scrinalia.archive_worker_schedules")
    c.execute("NOTIFY scrinalia_scheduler, 'schedule'")  # re-reads next_wakeup: sleeps until the instant
    at = c.execute(
        "SELECT min(next_run_at) FROM scrinalia.archive_worker_schedules WHERE worker_name LIKE 'spike%%'"
    ).fetchone()[0]
    wait_for(
        lambda: c.execute(
            "SELECT count(*) = %s FROM scrinalia.archive_worker_runs WHERE scheduled_for = %s", (n, at)
        ).fetchone()[0],
        timeout=60,
        interval=POLL,
        what=f"{n:,} spike runs",
        watch=[proc],
    )
    runs, workers, twice = c.execute(
        "SELECT count(*), count(DISTINCT worker_name), (SELECT count(*) - count(DISTINCT (worker_name, scheduled_for)) "
        "FROM scrinalia.archive_worker_runs WHERE trigger = 'SCHEDULE') "
        "FROM scrinalia.archive_worker_runs WHERE scheduled_for = %s",
        (at,),
    ).fetchone()
    check(runs == workers == n and twice == 0, f"spike: {runs} runs for {workers} workers, {twice} doubles")
    created = c.execute(
        "SELECT extract(epoch FROM max(created_at) - %s)::float8, "
        "count(DISTINCT xmin::text) FROM scrinalia.archive_worker_runs WHERE scheduled_for = %s",
        (at, at),
    ).fetchone()
    out = {"n": n, "last_created": created[0], "transactions": created[1]}
    if commit_ts:
        lat = sorted(_commit_lateness(c, at))
        out.update(first=lat[0], median=percentile(lat, 50), last=lat[-1], lateness=lat)
    return out


def scheduler_lateness(
    dsn: str,
    rounds: int,
    quick: bool,
    logdir: Path,
    admin_dsn: str | None = None,
    alone: int = 0,
    spike_n: int = 10_000,
) -> dict:
    """rounds minutes with pg_cron's jobs (when it is there) in the same minutes, then `alone`
    more minutes with its jobs unscheduled: what pg_cron's work at the boundary costs ours."""
    with conn(dsn) as c:
        seed.reset(c)
        seed.workers(c, N_SCHEDULES)
        for i in range(N_SCHEDULES):
            c.execute(
                "SELECT scrinalia.put_schedule(%s, '* * * * *', %s, '{}'::jsonb, true, 'bench')",
                (seed.worker_name(i), seed.ZONES[i % len(seed.ZONES)]),
            )
    if quick:
        cron = {"available": False, "why": "--quick moves our schedules' clock, which pg_cron does not read"}
    elif admin_dsn is None:
        cron = {"available": False, "why": "no superuser DSN to set pg_cron up with"}
    else:
        bench_db = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
        cron = pgcron.setup(admin_dsn, bench_db, N_SCHEDULES, wait=wait_for)
    listener = Listener(dsn, ("scrinalia_runs", pgcron.CHANNEL))
    procs = Procs()
    proc = procs.scheduler(dsn, log=logdir / "scheduler.log", env=child_env(), new_session=True)
    samples, per_round, seen, boundaries, loads = [], [], [], [], []
    cron_rounds, cron_missing = [], []
    seen_alone, cron_while_alone = [], 0
    # lateness to visibility, exactly: the run row's commit timestamp - its due instant
    commit_ts = _commit_timestamps_on(dsn)
    committed, committed_alone, cron_committed = [], [], []
    spike_result = None
    warmup = None
    alone = alone if cron["available"] else 0
    try:
        with conn(dsn) as c:
            wait_for(
                lambda: c.execute(
                    "SELECT count(*) = %s FROM scrinalia.archive_worker_schedules WHERE next_run_at IS NOT NULL",
                    (N_SCHEDULES,),
                ).fetchone()[0],
                timeout=60,
                interval=POLL,
                what="the scheduler arming the schedules",
                watch=[proc],
            )
            while len(per_round) + len(seen_alone) < rounds + alone:
                if cron["available"] and len(per_round) == rounds and not seen_alone:
                    pgcron.teardown(admin_dsn)  # from the next boundary on, ours alone
                if quick:
                    c.execute(
                        "UPDATE scrinalia.archive_worker_schedules "
                        "SET next_run_at = date_trunc('second', now()) + interval '2 seconds'"
                    )
                    c.execute("NOTIFY scrinalia_scheduler, 'schedule'")
                due = c.execute(
                    "SELECT min(next_run_at), max(next_run_at) FROM scrinalia.archive_worker_schedules"
                ).fetchone()
                check(due[0] == due[1], f"the schedules are not due at one instant: {due}")
                wait = (due[0] - c.execute("SELECT now()").fetchone()[0]).total_seconds()
                b = _epoch(c, due[0])
                # pg_cron reads its new jobs on its next loop: a boundary a few seconds away is a warm-up
                warm = cron["available"] and warmup is None and not per_round and wait < 10
                got = wait_for(
                    lambda: c.execute(
                        "SELECT array_agg(extract(epoch FROM created_at - scheduled_for)::float8) "
                        "FROM scrinalia.archive_worker_runs WHERE trigger = 'SCHEDULE' AND scheduled_for = %s "
                        "HAVING count(*) = %s",
                        (due[0], N_SCHEDULES),
                    ).fetchone(),
                    timeout=wait + 30,
                    interval=POLL,
                    what="200 runs for the due minute",
                    watch=[proc],
                )
                lat = got[0]
                check(len(lat) == N_SCHEDULES, f"{len(lat)} runs for {N_SCHEDULES} schedules")
                # before the cancel below rewrites the rows (a new xmin)
                com = _commit_lateness(c, due[0]) if commit_ts else []
                twice = c.execute(
                    "SELECT count(*) - count(DISTINCT (worker_name, scheduled_for)) "
                    "FROM scrinalia.archive_worker_runs WHERE trigger = 'SCHEDULE'"
                ).fetchone()[0]
                check(twice == 0, f"{twice} periods enqueued twice")
                # free the slots (the public cancel) so that the next minute enqueues again
                c.execute(
                    "SELECT scrinalia.cancel_run(run_id, 'bench') FROM scrinalia.archive_worker_runs "
                    "WHERE status = 'QUEUED'"
                )
                # the tick's one NOTIFY (all 200 runs commit together) may trail the rows by a moment
                ticks = wait_for(
                    lambda: [t for t, p in listener.between("scrinalia_runs", b - 1, b + 59) if p == "tick"],
                    timeout=10,
                    interval=POLL,
                    what="the tick's NOTIFY",
                    watch=[proc],
                )
                crons = []
                if cron["available"] and len(per_round) == rounds:
                    seen_alone.append(ticks[0] - b)
                    committed_alone += com
                    cron_while_alone += len(listener.between(pgcron.CHANNEL, b - 1, b + 59))
                    continue
                if cron["available"]:
                    until = b + 59  # a job not run by then has missed its minute
                    while True:
                        arrived = {
                            p: t for t, p in sorted(listener.between(pgcron.CHANNEL, b - 1, b + 59), reverse=True)
                        }
                        if len(arrived) >= N_SCHEDULES or time.time() >= until:
                            break
                        time.sleep(0.05)
                    crons = [t - b for t in arrived.values()]
                    cron_com = _pgcron_commit_lateness(c, due[0]) if commit_ts else []
                if warm:
                    warmup = {"boundary": b, "seen": ticks[0] - b, "cron": len(crons)}
                    continue
                samples += lat
                committed += com
                per_round.append(max(lat))
                seen.append(ticks[0] - b)
                boundaries.append(b)
                loads.append(os.getloadavg()[0] if hasattr(os, "getloadavg") else None)
                if cron["available"]:
                    cron_rounds.append(sorted(crons))
                    cron_committed += cron_com
                    cron_missing.append(N_SCHEDULES - len(crons))
            if spike_n:
                c.execute("UPDATE scrinalia.archive_worker_schedules SET enabled = false")  # the minute ones rest
                spike_result = spike(c, spike_n, commit_ts, proc)
    finally:
        procs.stop_all()
        listener.close()
        if cron["available"]:
            cron["details"] = pgcron.run_details(admin_dsn, boundaries[0] - 1) if boundaries else []
            pgcron.teardown(admin_dsn)
    return {
        "schedules": N_SCHEDULES,
        "samples": samples,
        "rounds": rounds,
        "round_max": per_round,
        "seen": seen,
        "commit_ts": commit_ts,
        "committed": committed,
        "committed_alone": committed_alone,
        "pgcron_committed": cron_committed,
        "spike": spike_result,
        "boundaries": boundaries,
        "load": loads,
        "warmup": warmup,
        "seen_alone": seen_alone,
        "cron_while_alone": cron_while_alone,
        "pgcron": {**cron, "rounds": cron_rounds, "missing": cron_missing},
    }


def _enqueue_and_await(c, worker: str, proc: Proc) -> float:
    """Enqueues one run, waits until the runner finished it; returns started_at - created_at."""
    run_id = c.execute(
        "SELECT run_id FROM scrinalia.enqueue(%s, '{}'::jsonb, 'MANUAL', 'bench')", (worker,)
    ).fetchone()[0]
    got = wait_for(
        lambda: c.execute(
            "SELECT extract(epoch FROM started_at - created_at)::float8 FROM scrinalia.archive_worker_runs "
            "WHERE run_id = %s AND status = 'SUCCEEDED'",
            (run_id,),
        ).fetchone(),
        timeout=30,
        interval=POLL,
        what=f"run #{run_id} claimed and finished",
        watch=[proc],
    )
    return got[0]


def claim_latency(dsn: str, n: int, logdir: Path) -> dict:
    with conn(dsn) as c:
        seed.reset(c)
        seed.workers(c, n + 1)
    cmd, which = runner_command(dsn)
    procs = Procs()
    proc = procs.start([sys.executable, *cmd], child_env(), log=logdir / "runner.log", new_session=True)
    samples = []
    rnd = random.Random(4)
    try:
        with conn(dsn) as c:
            # a first run, not counted, proves the runner connected and LISTENs
            _enqueue_and_await(c, seed.worker_name(n), proc)
            for i in range(n):
                # idle long enough that the runner is asleep in its LISTEN wait
                time.sleep(rnd.uniform(0.02, 0.05))
                samples.append(_enqueue_and_await(c, seed.worker_name(i), proc))
            states = dict(
                c.execute("SELECT status::text, count(*) FROM scrinalia.archive_worker_runs GROUP BY 1").fetchall()
            )
        check(states == {"SUCCEEDED": n + 1}, f"ledger is {states}, expected {n + 1} SUCCEEDED")
    finally:
        procs.stop_all()
    return {"samples": samples, "runner": which}


def run(
    dsn: str, quick: bool = False, logdir: Path | None = None, admin_dsn: str | None = None, minutes: int | None = None
) -> Result:
    logdir = logdir or Path(tempfile.mkdtemp(prefix="scrinalia-bench-"))
    rows, notes, sched_ok = [], [], None
    data = {}
    rounds = 1 if quick else (minutes or 10)
    if scheduler_available():
        s = scheduler_lateness(dsn, rounds, quick, logdir, admin_dsn=admin_dsn, alone=0 if quick else ALONE_MINUTES)
        data["scheduler"] = s
        rows, notes, sched_ok = scheduler_rows(s, quick)
    else:
        rows.append(["scheduler", "-", "-", "-", "-", "p99 <= 50 ms", "not measured"])
        notes.append("scrinalia_workers.scheduler is not installed yet: the scheduler lateness was not measured.")
    n = 50 if quick else 200
    cl = claim_latency(dsn, n, logdir)
    data["claim"] = cl
    ok = percentile(cl["samples"], 99) <= 0.050
    # unmeasured scheduler: the verdict is open unless the part measured already failed
    met = (ok and sched_ok) if sched_ok is not None else (None if ok else False)
    rows.append(
        row(
            "idle runner: run started_at - created_at",
            f"{n}",
            cl["samples"],
            "p99 <= 50 ms",
            "met" if ok else "NOT met",
        )
    )
    notes.append(
        f"Runner: {cl['runner']}; runs enqueued one at a time with scrinalia.enqueue() "
        "20-50 ms apart, each awaited until SUCCEEDED before the next."
    )
    headline = "; ".join(
        f"{r[0].split(',')[0].split(':')[0]} p99 {r[3]}"
        for r in rows
        if r[3] != "-" and "database's view" not in r[0] and "own record" not in r[0]
    )
    return Result(
        key="lateness",
        title="4. Lateness: scheduler against pg_cron, and the NOTIFY-woken runner",
        setup=[
            f"a. `python -m scrinalia_workers.scheduler --dsn ... --json` as its own process; {N_SCHEDULES} workers "
            f"with schedules `* * * * *` (zones cycling over {len(seed.ZONES)}), saved with scrinalia.put_schedule() "
            "and armed by the scheduler itself; "
            + (
                "--quick: next_run_at moved 2 s ahead and the scheduler NOTIFYed."
                if quick
                else f"the real minute boundaries, {rounds} in a row; the runs are cancelled between minutes. "
                f"pg_cron, when installed, runs {N_SCHEDULES} jobs `* * * * *` in the same minutes, timed "
                "the same way (the commit as a LISTENing client sees it)."
            ),
            f"b. An idle runner process LISTENing on scrinalia_runs; {n} runs enqueued one at a time; "
            "the latency is started_at - created_at (enqueue's now() to claim's now(), the database's clock).",
        ],
        headers=["what", "samples", "p50", "p99", "max", "target", "verdict"],
        rows=rows,
        target="scheduler p99 <= 50 ms as seen (<= 100 ms created_at); enqueue-to-claim p99 <= 50 ms",
        met=met,
        notes=notes,
        headline=headline,
        data=data,
    )
