"""Retries: a new row per attempt, bounded jittered backoff, three attempts, never twice."""

from __future__ import annotations

import pytest

from helpers import (
    claim,
    finish,
    heap_pages,
    make_worker,
    make_workers,
    plan_reads,
    put_schedule,
    raises_sqlstate,
    run_row,
    set_next_run,
    tick,
)


def scheduled_run(db, worker="ocr"):
    make_worker(db, worker)
    put_schedule(db, worker, request={"options": {"dpi": 72}})
    tick(db, only=[worker])
    set_next_run(db, worker, "1 minute")
    return tick(db, only=[worker])[1][0][2]


def fail_current(db, error="boom"):
    run_id, token = claim(db)[:2]
    finish(db, run_id, token, "FAILED", error)
    return run_id


def create_retries(db):
    return db.execute(
        "SELECT run_id, retry_of, worker_name, attempt, not_before - now() FROM scrinalia.create_retries()"
    ).fetchall()


def release_backoff(db):
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET not_before = now() - interval '1 second' WHERE status = 'QUEUED'"
    )


@pytest.mark.parametrize(
    "attempt, jitter, seconds",
    [
        (1, 0.0, 60),
        (2, 0.0, 120),
        (3, 0.0, 240),
        (5, 0.0, 960),
        (6, 0.0, 1800),  # 60 * 2^5 = 1920, capped before the jitter
        (1, 0.2, 72),
        (1, -0.2, 48),
        (2, 0.2, 144),
        (6, 0.2, 1800),  # the jittered value is capped again
        (6, -0.2, 1440),
        (40, 0.0, 1800),
    ],
)
def test_retry_delay_is_capped_and_jittered(db, attempt, jitter, seconds):
    got = db.execute("SELECT extract(epoch FROM scrinalia.retry_delay(%s, %s))", (attempt, jitter)).fetchone()[0]
    assert float(got) == pytest.approx(seconds)


def test_retry_delay_rejects_jitter_out_of_bounds(db):
    with raises_sqlstate("SW002"):
        db.execute("SELECT scrinalia.retry_delay(1, 0.3)")
    with raises_sqlstate("SW002"):
        db.execute("SELECT scrinalia.retry_delay(0, 0)")


def test_jitter_stays_within_twenty_percent_over_many_draws(db):
    rows = db.execute("""
        SELECT a, min(s), max(s), count(DISTINCT round(s::numeric, 3))
          FROM (SELECT a, extract(epoch FROM scrinalia.retry_backoff(a))::float8 AS s
                  FROM generate_series(1, 6) a, generate_series(1, 4000)) d
         GROUP BY a ORDER BY a""").fetchall()
    for attempt, lo, hi, distinct in rows:
        base = min(60 * 2 ** (attempt - 1), 1800)
        assert base * 0.8 - 1e-6 <= lo and hi <= min(base * 1.2, 1800) + 1e-6
        assert hi <= 1800
        assert distinct > 100  # it really is jittered
        if base < 1800:  # both ends of the band are reached in 4000 draws
            assert lo < base * 0.82 and hi > base * 1.18


def test_failed_scheduled_run_gets_one_retry_row(db):
    first = scheduled_run(db)
    fail_current(db)
    assert run_row(db, first)["retry_pending"] is True
    [(retry, retry_of, worker, attempt, wait)] = create_retries(db)
    assert (retry_of, worker, attempt) == (first, "ocr", 2)
    assert 48 <= wait.total_seconds() <= 72
    r, f = run_row(db, retry), run_row(db, first)
    assert r["trigger"] == "SCHEDULE" and r["status"] == "QUEUED" and r["request"] == f["request"]
    assert r["scheduled_for"] == f["scheduled_for"] and r["config"]["options"]["dpi"] == 72
    assert f["retry_pending"] is False and f["error"] == "boom"  # the failure keeps its facts
    assert create_retries(db) == []  # never twice for one row


def test_three_attempts_in_all(db):
    scheduled_run(db)
    fail_current(db)
    [(second, _, _, attempt2, _)] = create_retries(db)
    release_backoff(db)
    fail_current(db)
    [(third, retry_of, _, attempt3, wait)] = create_retries(db)
    assert (attempt2, attempt3, retry_of) == (2, 3, second)
    assert 96 <= wait.total_seconds() <= 144
    release_backoff(db)
    fail_current(db)
    assert create_retries(db) == []
    assert run_row(db, third)["retry_pending"] is False
    labels = db.execute("SELECT attempt_label FROM scrinalia.worker_run_history ORDER BY run_id").fetchall()
    assert labels == [("1/3",), ("2/3",), ("3/3",)]


def test_manual_cli_and_cancelled_runs_are_never_retried(db):
    make_worker(db)
    for trigger in ("MANUAL", "CLI"):
        db.execute("SELECT scrinalia.enqueue('ocr', '{}', %s)", (trigger,))
        fail_current(db)
    db.execute("SELECT scrinalia.enqueue('ocr')")
    run_id, token = claim(db)[:2]
    db.execute("UPDATE scrinalia.archive_worker_runs SET lease_expires_at = now() - interval '1 s'")
    db.execute("SELECT * FROM scrinalia.reap_expired_leases()")
    first = scheduled_run(db, "sched")
    db.execute("SELECT scrinalia.cancel_run(%s)", (first,))
    assert create_retries(db) == []
    assert (
        db.execute("SELECT count(*) FROM scrinalia.archive_worker_runs WHERE retry_pending OR attempt > 1").fetchone()[
            0
        ]
        == 0
    )


def test_lease_expiry_interrupts_and_the_next_attempt_succeeds(db):
    first = scheduled_run(db)
    claim(db, lease="5 seconds")
    db.execute("UPDATE scrinalia.archive_worker_runs SET lease_expires_at = now() - interval '1 second'")
    [(reaped, status)] = db.execute("SELECT run_id, status FROM scrinalia.reap_expired_leases()").fetchall()
    assert (reaped, status) == (first, "INTERRUPTED")
    [(retry, retry_of, _, attempt, _)] = create_retries(db)
    assert (retry_of, attempt) == (first, 2)
    release_backoff(db)
    run_id, token = claim(db)[:2]
    assert run_id == retry
    assert finish(db, run_id, token)[0] == "SUCCEEDED"
    assert create_retries(db) == []


def test_retry_waits_when_a_manual_run_holds_the_slot(db):
    """enqueue() refuses a manual run while a retry is owed (test_trust_sql.py); a
    manual row that holds the slot anyway (written by the owner, or from before that
    rule) delays the retry, which stays owed, not lost."""
    first = scheduled_run(db)
    fail_current(db)
    manual = db.execute(
        "INSERT INTO scrinalia.archive_worker_runs (worker_name, trigger) VALUES ('ocr', 'MANUAL') RETURNING run_id"
    ).fetchone()[0]
    assert create_retries(db) == []
    assert run_row(db, first)["retry_pending"] is True  # owed, not lost
    run_id, token = claim(db)[:2]
    assert run_id == manual
    finish(db, run_id, token)
    [(_, retry_of, _, attempt, _)] = create_retries(db)
    assert (retry_of, attempt) == (first, 2)


def test_finding_candidates_does_not_read_the_history(db):
    names = make_workers(db, 50)
    # 30,000 finished scheduled runs, a third of them failed and already retried
    db.execute(
        """
        INSERT INTO scrinalia.archive_worker_runs
               (worker_name, trigger, status, scheduled_for, created_at, finished_at, error)
        SELECT (%s::text[])[1 + g %% 50], 'SCHEDULE',
               CASE WHEN g %% 3 = 0 THEN 'FAILED' ELSE 'SUCCEEDED' END::scrinalia.run_status,
               timestamptz '2020-01-01' + g * interval '1 minute', now(), now(),
               CASE WHEN g %% 3 = 0 THEN 'old' END
          FROM generate_series(1, 30000) g""",
        (names,),
    )
    db.execute("ANALYZE scrinalia.archive_worker_runs")
    first = scheduled_run(db)
    fail_current(db)

    flush = db.execute("SELECT current_setting('server_version_num')::int >= 150000").fetchone()[0]

    def scans():
        if flush:  # 13 and 14 report statistics through the collector, within its delay
            db.execute("SELECT pg_stat_force_next_flush()")
        db.execute("SELECT pg_stat_clear_snapshot()")
        return db.execute("""SELECT seq_scan, seq_tup_read FROM pg_stat_user_tables
                              WHERE relid = 'scrinalia.archive_worker_runs'::regclass""").fetchone()

    before = scans()
    assert [r[1] for r in create_retries(db)] == [first]
    after = scans()
    assert after == before, "create_retries scanned the ledger"


def test_retries_owed_to_busy_slots_cost_no_read_of_the_catalogue(db):
    """A retry owed to a worker whose slot a manual run holds stays owed, and the pass
    that finds it so reads the few rows concerned, not every worker: the scheduler
    calls create_retries() at every pass, every half second while such a retry waits."""
    names = make_workers(db, 20000)
    busy = names[::1000]
    db.execute(
        """
        INSERT INTO scrinalia.archive_worker_runs
               (worker_name, trigger, status, scheduled_for, finished_at, error, retry_pending)
        SELECT w, 'SCHEDULE', 'FAILED', now() - interval '1 hour', now(), 'boom', true
          FROM unnest(%s::text[]) AS w""",
        (busy,),
    )
    db.execute(
        "INSERT INTO scrinalia.archive_worker_runs (worker_name, trigger) SELECT w, 'MANUAL' FROM unnest(%s::text[]) w",
        (busy,),
    )
    db.execute("ANALYZE scrinalia.archive_workers")
    db.execute("ANALYZE scrinalia.archive_worker_runs")
    assert create_retries(db) == []  # (the session's caches warm: the plan reads only data)
    returned, read = plan_reads(db, "SELECT * FROM scrinalia.create_retries()")
    assert returned == 0
    owed = db.execute("SELECT count(*) FROM scrinalia.archive_worker_runs WHERE retry_pending").fetchone()[0]
    assert owed == len(busy)
    worker_pages = heap_pages(db, "scrinalia.archive_workers")
    # (each of the 20 owed: a look at its slot, a few pages; the catalogue is ten times that)
    assert worker_pages >= 150
    assert read < worker_pages
    # a slot set free: that worker's retry is created, the others stay owed
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET status = 'CANCELLED', finished_at = now()"
        " WHERE worker_name = %s AND trigger = 'MANUAL'",
        (busy[7],),
    )
    made = create_retries(db)
    assert [(w, attempt) for _, _, w, attempt, _ in made] == [(busy[7], 2)]
