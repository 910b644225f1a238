"""worker_agenda shows a slot held by an owed retry: with no scheduler running, a failed
scheduled attempt makes enqueue answer SW010; the agenda says why: the failed attempt,
the attempt its retry will be, and since when."""

from __future__ import annotations

import psycopg.rows

from helpers import claim, finish, make_worker, raises_sqlstate, run_row, scheduled_run

OWED = "SELECT active_run_id, owed_by_run_id, owed_by_status, owed_attempt, owed_since FROM scrinalia.worker_agenda"


def test_the_agenda_shows_the_failed_attempt_and_the_retry_it_is_owed(db):
    make_worker(db, "ocr")
    run_id = scheduled_run(db, "ocr")
    got, token, *_ = claim(db)
    assert got == run_id
    finish(db, run_id, token, "FAILED", "disk full")
    failed = run_row(db, run_id)
    assert failed["retry_pending"]
    with raises_sqlstate("SW010", "owed its retry"):
        db.execute("SELECT scrinalia.enqueue('ocr')")

    row = db.execute(OWED + " WHERE worker_name = 'ocr'").fetchone()
    assert row == (None, run_id, "FAILED", 2, failed["finished_at"])

    # once the retry exists it is the active run, and nothing is owed any more
    (retry_id,) = db.execute("SELECT run_id FROM scrinalia.create_retries()").fetchone()
    row = db.execute(OWED + " WHERE worker_name = 'ocr'").fetchone()
    assert row == (retry_id, None, None, None, None)


def test_the_agenda_keeps_its_columns_in_place(db):
    # a view replaced in place may only grow at its end: the earlier columns keep their order
    cur = db.cursor(row_factory=psycopg.rows.dict_row)
    cols = list(cur.execute("SELECT * FROM scrinalia.worker_agenda LIMIT 0").description or [])
    names = [c.name for c in cols]
    owed = names.index("owed_by_run_id")
    assert names[owed - 1 : owed + 4] == [
        "arm_retry_at",
        "owed_by_run_id",
        "owed_by_status",
        "owed_attempt",
        "owed_since",
    ]
    # what 0.5 added comes after them
    assert names[owed + 4 :] == ["max_run_time", "active_started_at", "active_deadline_at", "skipped_in_a_row"]
