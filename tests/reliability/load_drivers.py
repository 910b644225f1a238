"""Processes that drive the SQL API the way the daemons do, for the load scenario.

`scheduler_loop` is one scheduler pass after another (reap, retries, due + tick),
recording every decision in public.load_decisions so that the lost-period check
has the skips; `runner_loop` claims, "works" a few milliseconds, and reports,
failing a given share of its runs. Both stop when the stop event is set.
"""

from __future__ import annotations

import random
import time

import psycopg

from scrinalia_workers import cron

DECISIONS_DDL = """
CREATE TABLE IF NOT EXISTS public.load_decisions (
    worker_name text, decision text, scheduled_for timestamptz, at timestamptz, done_at timestamptz)"""


def scheduler_pass(conn: psycopg.Connection, name: str) -> int:
    with conn.transaction():
        conn.execute("SELECT count(*) FROM scrinalia.reap_expired_leases()")
        conn.execute("SELECT count(*) FROM scrinalia.create_retries()")
        due = conn.execute("SELECT worker_name, cron, timezone, db_now FROM scrinalia.due_schedules()").fetchall()
        if not due:
            return 0
        now = due[0][3]
        nexts = cron.next_occurrences([(d[1], d[2]) for d in due], now)
        conn.execute(
            """
            INSERT INTO public.load_decisions
            SELECT worker_name, decision, scheduled_for, now(), clock_timestamp()
              FROM scrinalia.tick(%s::text[], %s::timestamptz[], %s)""",
            ([d[0] for d in due], nexts, name),
        )
        return len(due)


def scheduler_loop(dsn: str, stop, passes) -> None:
    conn = psycopg.connect(dsn, autocommit=True, application_name="load scheduler")
    while not stop.is_set():
        n = scheduler_pass(conn, "load")
        passes.value += 1
        if n == 0:
            # the daemon sleeps until next_wakeup(); a short poll is as good for a test driver
            wake = conn.execute("SELECT extract(epoch FROM scrinalia.next_wakeup() - now())").fetchone()[0]
            time.sleep(min(max(float(wake or 0.2), 0.0), 0.2))
    conn.close()


def runner_loop(dsn: str, runner_id: str, stop, fail_rate: float, seed: int, done) -> None:
    rnd = random.Random(seed)
    conn = psycopg.connect(dsn, autocommit=True, application_name=f"load runner {runner_id}")
    while not stop.is_set():
        row = conn.execute(
            "SELECT run_id, lease_token FROM scrinalia.claim_next(%s, '1 minute')", (runner_id,)
        ).fetchone()
        if row is None:
            time.sleep(0.05)
            continue
        time.sleep(rnd.uniform(0, 0.004))  # the handler's work
        if rnd.random() < fail_rate:
            conn.execute("SELECT scrinalia.finish(%s, %s, 'FAILED', 'injected failure')", row)
        else:
            conn.execute("SELECT scrinalia.finish(%s, %s, 'SUCCEEDED')", row)
        with done.get_lock():
            done.value += 1
    conn.close()
