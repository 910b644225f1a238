"""latest_finished_periods() (what worker_metrics() and current_alerts() read) answers
exactly what its earlier definition answered, a walk of every worker's history, on
varied ledgers: retries, INTERRUPTED, CANCELLED, several periods per worker, periods
still open (a retry owed, queued or running), manual runs, workers with no runs."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import seed  # noqa: E402

# The definition of the previous release, as a temporary function of the session.
OLD_DEFINITION = """
CREATE FUNCTION pg_temp.latest_finished_periods_before()
RETURNS TABLE (worker_name text, scheduled_for timestamptz, run_ids bigint[], attempts integer,
               last_status scrinalia.run_status, last_error text, finished_at timestamptz)
LANGUAGE sql STABLE
AS $$
    SELECT s.worker_name, p.scheduled_for, p.run_ids, p.attempts, p.last_status, p.last_error, p.finished_at
      FROM scrinalia.archive_worker_schedules s
     CROSS JOIN LATERAL (
        SELECT a1.scheduled_for, c.run_ids, c.attempts, c.last_status, c.last_error, c.finished_at
          FROM scrinalia.archive_worker_runs a1
         CROSS JOIN LATERAL (
            WITH RECURSIVE chain AS (
                SELECT r.run_id, r.attempt, r.status, r.error, r.finished_at, r.retry_pending
                  FROM scrinalia.archive_worker_runs r WHERE r.run_id = a1.run_id
                UNION ALL
                SELECT r.run_id, r.attempt, r.status, r.error, r.finished_at, r.retry_pending
                  FROM scrinalia.archive_worker_runs r JOIN chain ON r.retry_of = chain.run_id
            )
            SELECT array_agg(chain.run_id ORDER BY chain.attempt) AS run_ids,
                   max(chain.attempt) AS attempts,
                   (array_agg(chain.status ORDER BY chain.attempt DESC))[1] AS last_status,
                   (array_agg(chain.error ORDER BY chain.attempt DESC))[1] AS last_error,
                   (array_agg(chain.finished_at ORDER BY chain.attempt DESC))[1] AS finished_at,
                   bool_or(chain.retry_pending OR chain.status IN ('QUEUED', 'RUNNING')) AS open
              FROM chain
         ) c
         WHERE a1.worker_name = s.worker_name AND a1.attempt = 1 AND a1.scheduled_for IS NOT NULL
           AND a1.status NOT IN ('QUEUED', 'RUNNING')
           AND NOT c.open
         ORDER BY a1.run_id DESC
         LIMIT 1
     ) p
$$
"""

CLOSED = (
    ["SUCCEEDED"],
    ["FAILED", "SUCCEEDED"],
    ["INTERRUPTED", "SUCCEEDED"],
    ["FAILED", "FAILED", "FAILED"],
    ["FAILED", "INTERRUPTED", "INTERRUPTED"],
    ["INTERRUPTED", "FAILED", "SUCCEEDED"],
    ["CANCELLED"],
    ["FAILED", "CANCELLED"],
)
# A period still open: the last attempt owes a retry (*), or is live.
OPEN = (
    ["FAILED*"],
    ["FAILED", "INTERRUPTED*"],
    ["FAILED", "QUEUED"],
    ["RUNNING"],
    ["QUEUED"],
    ["INTERRUPTED", "RUNNING"],
)

INSERT = """
INSERT INTO scrinalia.archive_worker_runs
       (worker_name, status, trigger, attempt, retry_of, scheduled_for, started_at, finished_at,
        error, retry_pending, lease_token, lease_owner, lease_expires_at, requested_by)
VALUES (%(w)s, %(status)s::scrinalia.run_status, %(trigger)s::scrinalia.run_trigger, %(attempt)s, %(retry_of)s, %(period)s,
        CASE WHEN %(status)s::text <> 'QUEUED' THEN now() END,
        CASE WHEN %(status)s::text NOT IN ('QUEUED', 'RUNNING') THEN now() - make_interval(secs => %(n)s) END,
        CASE WHEN %(status)s::text IN ('FAILED', 'INTERRUPTED') THEN 'boom ' || %(n)s END, %(pending)s,
        CASE WHEN %(status)s::text = 'RUNNING' THEN gen_random_uuid() END,
        CASE WHEN %(status)s::text = 'RUNNING' THEN 'test' END,
        CASE WHEN %(status)s::text = 'RUNNING' THEN now() + interval '1 hour' END, 'test')
RETURNING run_id
"""


def worker_plan(rng: random.Random) -> list[tuple]:
    """One worker's runs in their order: (kind, period, attempts), kind SCHEDULE or MANUAL/CLI."""
    plan: list[tuple] = []
    periods = rng.choice([0, 1, 2, 3, 5])
    for p in range(periods):
        last = p == periods - 1
        plan.append(("SCHEDULE", p, rng.choice(OPEN if last and rng.random() < 0.4 else CLOSED)))
        if rng.random() < 0.3:
            plan.append((rng.choice(["MANUAL", "CLI"]), None, [rng.choice(["SUCCEEDED", "FAILED", "CANCELLED"])]))
    if periods == 0 and rng.random() < 0.5:
        plan.append(("MANUAL", None, ["SUCCEEDED"]))
    return plan


def build_ledger(db, rng: random.Random, n_workers: int) -> None:
    names = [f"w{i:03d}" for i in range(n_workers)]
    for name in names:
        db.execute("INSERT INTO scrinalia.archive_workers (worker_name) VALUES (%s)", (name,))
        if rng.random() < 0.85:
            db.execute(
                "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone, enabled) "
                "VALUES (%s, '0 * * * *', 'UTC', %s)",
                (name, rng.random() < 0.8),
            )
    # every worker's attempts, in order, interleaved with the other workers' as a ledger is
    queues = {name: [] for name in names}
    for name in names:
        for kind, period, attempts in worker_plan(rng):
            for a, status in enumerate(attempts, start=1):
                queues[name].append((kind, period, a, status))
    previous: dict[str, int] = {}
    while any(queues.values()):
        name = rng.choice([n for n in names if queues[n]])
        kind, period, attempt, status = queues[name].pop(0)
        pending = status.endswith("*")
        status = status.rstrip("*")
        run_id = db.execute(
            INSERT,
            {
                "w": name,
                "status": status,
                "trigger": kind,
                "attempt": attempt,
                "retry_of": previous[name] if attempt > 1 else None,
                "period": f"2026-01-01T{period:02d}:00:00Z" if kind == "SCHEDULE" else None,
                "n": rng.randrange(10_000),
                "pending": pending,
            },
        ).fetchone()[0]
        previous[name] = run_id


def compare(db) -> list[tuple]:
    db.execute(OLD_DEFINITION)
    before = db.execute("SELECT * FROM pg_temp.latest_finished_periods_before() ORDER BY 1").fetchall()
    now = db.execute("SELECT * FROM scrinalia.latest_finished_periods() ORDER BY 1").fetchall()
    assert now == before
    return now


@pytest.mark.parametrize("seed_value", [1, 2, 3])
def test_the_same_periods_as_the_walk_of_every_history(db, seed_value):
    rng = random.Random(seed_value)
    build_ledger(db, rng, 80)
    rows = compare(db)
    # the ledger had every case: a worker answered from below its open latest period,
    # periods that ended FAILED, CANCELLED and INTERRUPTED, scheduled workers with no answer
    below_open = db.execute(
        """SELECT count(*) FROM scrinalia.latest_finished_periods() p
            WHERE EXISTS (SELECT FROM scrinalia.archive_worker_runs r
                           WHERE r.worker_name = p.worker_name AND r.attempt = 1
                             AND r.scheduled_for > p.scheduled_for)"""
    ).fetchone()[0]
    assert below_open > 0
    assert {r[4] for r in rows} >= {"SUCCEEDED", "FAILED", "INTERRUPTED", "CANCELLED"}
    assert any(r[3] == 3 for r in rows) and any(r[3] == 1 for r in rows)
    scheduled = db.execute("SELECT count(*) FROM scrinalia.archive_worker_schedules").fetchone()[0]
    assert 0 < len(rows) < scheduled


def test_a_worker_owed_a_retry_reports_its_previous_period(db):
    build_ledger(db, random.Random(0), 0)
    db.execute("INSERT INTO scrinalia.archive_workers (worker_name) VALUES ('ocr'), ('idle')")
    db.execute(
        "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone) "
        "VALUES ('ocr', '0 * * * *', 'UTC'), ('idle', '0 * * * *', 'UTC')"
    )
    ids = []
    for period, attempt, status, pending in (
        (0, 1, "FAILED", False),
        (0, 2, "FAILED", False),
        (0, 3, "FAILED", False),
        (1, 1, "FAILED", True),
    ):
        ids.append(
            db.execute(
                INSERT,
                {
                    "w": "ocr",
                    "status": status,
                    "trigger": "SCHEDULE",
                    "attempt": attempt,
                    "retry_of": ids[-1] if attempt > 1 else None,
                    "period": f"2026-01-01T0{period}:00:00Z",
                    "n": 1,
                    "pending": pending,
                },
            ).fetchone()[0]
        )
    [row] = compare(db)
    assert (row[0], row[2], row[3], row[4]) == ("ocr", ids[:3], 3, "FAILED")
    kinds = db.execute("SELECT kind, worker_name, run_ids FROM scrinalia.current_alerts()").fetchall()
    assert ("FAILED_AFTER_ALL_ATTEMPTS", "ocr", ids[:3]) in kinds
    [m] = db.execute(
        "SELECT failed_after_all_attempts, retries_created FROM scrinalia.worker_metrics() WHERE worker_name = 'ocr'"
    ).fetchall()
    assert m == (1, 2)


def test_the_same_periods_on_the_benchmark_history(db):
    seed.workers(db, 300)
    seed.schedules(db, 300)
    seed.history(db, 20_000, 300)
    # a retry owed on one worker in ten, newer than its history
    db.execute(
        """INSERT INTO scrinalia.archive_worker_runs
                  (worker_name, status, trigger, attempt, scheduled_for, finished_at, retry_pending)
           SELECT format('bw%s', lpad(i::text, 6, '0')), 'FAILED', 'SCHEDULE', 1,
                  timestamptz '2030-01-01' + make_interval(mins => i), now(), true
             FROM generate_series(0, 299, 10) i"""
    )
    assert len(compare(db)) == 300


def test_the_metrics_readers_are_never_jit_compiled(db):
    """Their planner costs are far above what they do: compiled, a call took many times
    longer than the query itself."""
    rows = db.execute(
        """SELECT p.proname, coalesce('jit=off' = ANY (p.proconfig), false)
             FROM pg_proc p WHERE p.pronamespace = 'scrinalia'::regnamespace
              AND p.proname IN ('latest_finished_periods', 'worker_metrics', 'current_alerts', 'run_counts',
                                'scheduler_metrics')"""
    ).fetchall()
    assert len(rows) == 5 and all(off for _, off in rows), rows


def _chain(db, worker: str, period: int, attempts: list[tuple[int, str]]) -> list[int]:
    ids: list[int] = []
    for attempt, status in attempts:
        pending = status.endswith("*")
        ids.append(
            db.execute(
                INSERT,
                {
                    "w": worker,
                    "status": status.rstrip("*"),
                    "trigger": "SCHEDULE",
                    "attempt": attempt,
                    "retry_of": ids[-1] if ids else None,
                    "period": f"2026-01-01T{period:02d}:00:00Z",
                    "n": period * 10 + attempt,
                    "pending": pending,
                },
            ).fetchone()[0]
        )
    return ids


def test_the_same_periods_for_chains_written_by_hand(db):
    """Chains the tick never makes (attempts not rising 1, 2, 3, a fourth link) are
    answered as the previous definition answered them."""
    shapes = {
        "falling": [(1, "FAILED"), (3, "FAILED"), (2, "SUCCEEDED")],
        "long": [(1, "FAILED"), (2, "FAILED"), (3, "FAILED"), (3, "SUCCEEDED")],
        "skips": [(1, "FAILED"), (3, "INTERRUPTED")],
        "flat": [(1, "FAILED"), (2, "FAILED"), (2, "CANCELLED")],
        "long-open": [(1, "FAILED"), (2, "FAILED"), (3, "FAILED"), (2, "FAILED*")],
    }
    for name, shape in shapes.items():
        db.execute("INSERT INTO scrinalia.archive_workers (worker_name) VALUES (%s)", (name,))
        db.execute(
            "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone) VALUES (%s, '0 * * * *', 'UTC')",
            (name,),
        )
        _chain(db, name, 1, [(1, "SUCCEEDED")])
        _chain(db, name, 2, shape)
    rows = {r[0]: r for r in compare(db)}
    assert rows["long"][3] == 3 and len(rows["long"][2]) == 4
    assert rows["skips"][4] == "INTERRUPTED"
    assert rows["long-open"][1].hour == 1  # its newest period is open: the one before


def test_the_lateness_gauge_is_its_last_runs_and_read_with_the_tallied_period(db):
    """worker_metrics()'s last lateness is created_at - scheduled_for of the run the tick
    last enqueued for the schedule, whatever that run became: finished, live, owed a
    retry, or deleted since (unknown then). When that run is the first attempt of the
    worker's latest finished period, as it mostly is, the value is read with the tallied
    period: a scrape probes the ledger only for the others, not once per schedule."""
    build_ledger(db, random.Random(4), 80)
    # as the tick leaves them: a lateness of its own per run, and each schedule's last run
    # its newest attempt 1
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET created_at = scheduled_for + make_interval(secs => run_id % 97)"
        " WHERE scheduled_for IS NOT NULL"
    )
    seed.last_runs(db)
    db.execute("SELECT count(*) FROM scrinalia.worker_metrics()")  # (folds the ledger's writes)
    # one worker's latest finished period deleted, its last run with it
    gone = db.execute(
        """DELETE FROM scrinalia.archive_worker_runs r USING scrinalia.latest_period_tally t
            WHERE t.worker_name = (SELECT min(p.worker_name) FROM scrinalia.latest_period_tally p
                                     JOIN scrinalia.archive_worker_schedules s ON s.worker_name = p.worker_name
                                    WHERE s.last_run_id = p.run_ids[1])
              AND r.run_id = ANY (t.run_ids)
        RETURNING r.worker_name"""
    ).fetchall()[0][0]
    db.execute("SELECT count(*) FROM scrinalia.worker_metrics()")
    expected = dict(
        db.execute(
            """SELECT w.worker_name, date_part('epoch', r.created_at - r.scheduled_for)
                 FROM scrinalia.archive_workers w
                 LEFT JOIN scrinalia.archive_worker_schedules s ON s.worker_name = w.worker_name
                 LEFT JOIN scrinalia.archive_worker_runs r ON r.run_id = s.last_run_id"""
        ).fetchall()
    )
    tallied, other = db.execute(
        """SELECT count(*) FILTER (WHERE s.last_run_id = t.run_ids[1]),
                  count(*) FILTER (WHERE s.last_run_id IS DISTINCT FROM t.run_ids[1])
             FROM scrinalia.archive_worker_schedules s
             LEFT JOIN scrinalia.latest_period_tally t ON t.worker_name = s.worker_name
            WHERE s.last_run_id IS NOT NULL"""
    ).fetchone()
    assert tallied >= 20 and other >= 5  # (the ledger has both kinds)
    # (planned as on a ledger of any size: a probe per schedule is a scan of the key)
    db.execute("ANALYZE scrinalia.archive_worker_runs")
    probes = "SELECT pg_stat_get_xact_numscans('scrinalia.archive_worker_runs_pkey'::regclass)"
    with db.transaction():
        before = db.execute(probes).fetchone()[0]
        got = dict(db.execute("SELECT worker_name, last_lateness_seconds FROM scrinalia.worker_metrics()").fetchall())
        scans = db.execute(probes).fetchone()[0] - before
    assert got == expected
    assert expected[gone] is None and any(v is not None for v in expected.values())
    assert scans <= other < tallied + other
