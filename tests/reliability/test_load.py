"""Scenario D, load: 20,000 schedules every minute, 8 runner processes, 10 % of the
runs failing, across at least one full minute boundary; invariants sampled during
the run and checked at the end; throughput and lateness reported.

RELIABILITY_LOAD_SECONDS sets the length (CI default 75 s: the first boundary is at
most 60 s away, so at least one whole minute of periods is enqueued and worked).
RELIABILITY_LOAD_SCHEDULES and RELIABILITY_LOAD_RUNNERS scale it.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import time

from helpers import make_workers
from invariants import Decision, busy_slots, check_all, lost_periods
from load_drivers import DECISIONS_DDL, runner_loop, scheduler_loop, scheduler_pass

SECONDS = float(os.environ.get("RELIABILITY_LOAD_SECONDS", "75"))
SCHEDULES = int(os.environ.get("RELIABILITY_LOAD_SCHEDULES", "20000"))
RUNNERS = int(os.environ.get("RELIABILITY_LOAD_RUNNERS", "8"))
FAIL_RATE = 0.10


def _pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def test_load_every_minute_with_failures(db, db_dsn):
    workers = make_workers(db, SCHEDULES, "load")
    db.execute(DECISIONS_DDL)
    # armed on this minute's period, which has just passed: the first pass is a catch-up
    # of 20,000 runs, then the next boundary (at most 60 s away) comes on time, and
    # finds part of the slots still busy (skips)
    db.execute(
        "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone, next_run_at) "
        "SELECT w, '* * * * *', 'UTC', date_trunc('minute', now()) FROM unnest(%s::text[]) w",
        (workers,),
    )
    db.execute("ANALYZE")
    window_start, started = db.execute("SELECT date_trunc('minute', now()) - interval '1 second', now()").fetchone()

    ctx = mp.get_context("fork")
    stop = ctx.Event()
    passes = ctx.Value("l", 0)
    done = ctx.Value("l", 0)
    procs = [ctx.Process(target=scheduler_loop, args=(db_dsn, stop, passes), daemon=True)]
    procs += [
        ctx.Process(target=runner_loop, args=(db_dsn, f"load-runner-{i}", stop, FAIL_RATE, i, done), daemon=True)
        for i in range(RUNNERS)
    ]
    t0 = time.monotonic()
    for p in procs:
        p.start()
    samples = violations = 0
    try:
        while time.monotonic() - t0 < SECONDS:
            v = busy_slots(db)  # sampled during the run, not only at the end
            violations += len(v)
            assert v == [], v
            samples += 1
            time.sleep(0.5)
    finally:
        stop.set()
        for p in procs:
            p.join(timeout=20)
            if p.is_alive():
                p.kill()
    elapsed = time.monotonic() - t0
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]

    # the scheduler had a pass after the last failure: every owed retry exists now
    scheduler_pass(db, "final")
    db.execute("SELECT count(*) FROM scrinalia.create_retries()")
    settled = db.execute("SELECT now()").fetchone()[0]
    problems = check_all(db, settled_at=settled)
    assert problems == [], problems[:20]

    end = db.execute("SELECT max(at) FROM public.load_decisions").fetchone()[0]
    decisions = [
        Decision(*r)
        for r in db.execute(
            "SELECT worker_name, decision, scheduled_for, at FROM public.load_decisions WHERE worker_name = ANY (%s)",
            (random.Random(1).sample(workers, 300),),
        )
    ]
    for w in {d.worker for d in decisions}:
        assert lost_periods(db, w, "* * * * *", "UTC", (window_start, end), decisions) == []

    stats = db.execute("""
        SELECT count(*) FILTER (WHERE attempt = 1 AND trigger = 'SCHEDULE'),
               count(*) FILTER (WHERE attempt > 1),
               count(*) FILTER (WHERE status IN ('SUCCEEDED', 'FAILED')),
               count(*) FILTER (WHERE status = 'FAILED'),
               count(DISTINCT scheduled_for)
          FROM scrinalia.archive_worker_runs""").fetchone()
    periods, retries, finished, failed, minutes = stats
    skips = db.execute("SELECT count(*) FROM public.load_decisions WHERE decision = 'SKIPPED'").fetchone()[0]
    # lateness of the on-time periods (not the catch-up): when the row was created (the
    # tick's now()), when the tick committed it, when a runner started it
    late = db.execute(
        """
        SELECT extract(epoch FROM r.created_at - r.scheduled_for)::float8,
               extract(epoch FROM d.done_at - r.scheduled_for)::float8,
               extract(epoch FROM r.started_at - r.scheduled_for)::float8
          FROM scrinalia.archive_worker_runs r
          JOIN public.load_decisions d ON d.worker_name = r.worker_name AND d.scheduled_for = r.scheduled_for
                                      AND d.decision = 'ENQUEUED'
         WHERE r.attempt = 1 AND r.trigger = 'SCHEDULE' AND r.scheduled_for > %s""",
        (started,),
    ).fetchall()
    lateness, committed, start_late = ([x[i] for x in late if x[i] is not None] for i in range(3))
    span = db.execute(
        "SELECT extract(epoch FROM max(finished_at) - min(started_at))::float8 FROM scrinalia.archive_worker_runs"
    ).fetchone()[0]
    tick_s = db.execute(
        "SELECT max(extract(epoch FROM done_at - at))::float8 FROM public.load_decisions WHERE scheduled_for > %s",
        (started,),
    ).fetchone()[0]

    def dist(xs):
        if not xs:
            return None
        return {f"p{p}": round(_pct(xs, p), 3) for p in (50, 95, 99)} | {"max": round(max(xs), 3), "n": len(xs)}

    report = {
        "schedules": SCHEDULES,
        "runners": RUNNERS,
        "seconds": round(elapsed, 1),
        "minute_boundaries": minutes,
        "periods_enqueued": periods,
        "skips": skips,
        "retries": retries,
        "runs_finished": finished,
        "failed": failed,
        "throughput_runs_per_s": round(finished / span, 1) if span else None,
        "scheduler_passes": passes.value,
        "slot_samples": samples,
        "on_time_tick_s": tick_s,
        "created_minus_scheduled_s": dist(lateness),
        "committed_minus_scheduled_s": dist(committed),
        "started_minus_scheduled_s": dist(start_late),
    }
    print("\nRELIABILITY load:", report)
    assert minutes >= 2 and periods >= SCHEDULES  # the catch-up and at least one boundary on time
    assert finished > SCHEDULES / 4, f"only {finished} runs finished"
    assert 0.05 < failed / finished < 0.15  # the injected 10 %
