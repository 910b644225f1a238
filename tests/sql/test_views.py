"""The panel's views, and the queue counters that schedules must not move."""

from __future__ import annotations

import psycopg

from helpers import claim, finish, make_worker, put_schedule, set_next_run, tick


def agenda(db, worker="ocr"):
    cur = db.cursor(row_factory=psycopg.rows.dict_row)
    return cur.execute("SELECT * FROM scrinalia.worker_agenda WHERE worker_name = %s", (worker,)).fetchone()


def counters(db, worker="ocr"):
    return db.execute(
        "SELECT pending, processed FROM scrinalia.worker_queue_counters WHERE worker_name = %s", (worker,)
    ).fetchone()


def test_agenda_shows_the_schedule_state(db):
    make_worker(db)
    make_worker(db, "plain")
    put_schedule(db, "ocr", "0 2 * * *", "Europe/Berlin")
    a = agenda(db)
    assert (a["scheduled"], a["cron"], a["timezone"], a["paused"], a["awaiting_arm"]) == (
        True,
        "0 2 * * *",
        "Europe/Berlin",
        False,
        True,
    )
    assert agenda(db, "plain")["scheduled"] is False
    tick(db)
    set_next_run(db, "ocr", "1 minute")
    run_id = tick(db)[1][0][2]
    a = agenda(db)
    assert a["last_enqueued_at"] is not None and a["last_run_id"] == run_id and a["next_run_at"] is not None
    assert (a["active_run_id"], a["active_status"], a["active_trigger"]) == (run_id, "QUEUED", "SCHEDULE")
    set_next_run(db, "ocr", "1 minute")
    tick(db)
    a = agenda(db)
    assert a["last_skipped_at"] is not None and a["last_skip_reason"] == f"run #{run_id} is active"
    db.execute("SELECT scrinalia.set_schedule_enabled('ocr', false)")
    a = agenda(db)
    assert a["paused"] is True and a["next_run_at"] is None


def test_history_shows_trigger_attempt_and_retry_of(db):
    make_worker(db)
    put_schedule(db, "ocr")
    tick(db)
    set_next_run(db, "ocr", "1 minute")
    first = tick(db)[1][0][2]
    run_id, token = claim(db)[:2]
    finish(db, run_id, token, "FAILED", "boom")
    [(retry,)] = db.execute("SELECT run_id FROM scrinalia.create_retries()").fetchall()
    rows = db.execute("""SELECT run_id, trigger, status, attempt_label, retry_of, retried_by, not_before IS NOT NULL
                           FROM scrinalia.worker_run_history ORDER BY run_id""").fetchall()
    assert rows == [
        (first, "SCHEDULE", "FAILED", "1/3", None, retry, False),
        (retry, "SCHEDULE", "QUEUED", "2/3", first, None, True),
    ]


def test_schedules_ticks_skips_and_retries_do_not_move_the_counters(db):
    make_worker(db)
    db.execute("SELECT scrinalia.add_units('ocr', ARRAY['doc-1', 'doc-2', 'doc-3'])")
    db.execute("SELECT scrinalia.mark_units_processed('ocr', ARRAY['doc-1'])")
    assert counters(db) == (2, 1)
    put_schedule(db, "ocr")
    tick(db)  # armed
    set_next_run(db, "ocr", "1 minute")
    tick(db)  # enqueued
    set_next_run(db, "ocr", "1 minute")
    tick(db)  # skipped
    run_id, token = claim(db)[:2]
    finish(db, run_id, token, "FAILED", "boom")
    db.execute("SELECT * FROM scrinalia.create_retries()")  # retried
    kinds = db.execute("SELECT count(*) FROM scrinalia.archive_worker_runs").fetchone()[0]
    assert kinds == 2
    assert counters(db) == (2, 1)
