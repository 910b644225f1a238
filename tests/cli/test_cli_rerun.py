"""`runs rerun RUN_ID`: an ended run re-run by hand, and the link in `runs` and the timeline."""

from __future__ import annotations

import json

import pytest

from helpers import assert_one_line_error, claim, cli, finish, make_worker, scheduled_run


@pytest.fixture
def failed_period(db):
    """ocr's scheduled period: attempt 1 FAILED, its retry cancelled (the slot free)."""
    make_worker(db)
    sched = scheduled_run(db, "ocr")
    db.execute("SELECT scrinalia.set_schedule_enabled('ocr', false)")
    r = claim(db)
    finish(db, r[0], r[1], "FAILED", "boom")
    db.execute("SELECT pg_advisory_lock(scrinalia.scheduler_lock_key())")
    (retry,) = db.execute("SELECT run_id FROM scrinalia.create_retries()").fetchone()
    db.execute("SELECT scrinalia.cancel_run(%s)", (retry,))
    db.execute("SELECT pg_advisory_unlock(scrinalia.scheduler_lock_key())")
    return sched


def test_runs_rerun_enqueues_a_linked_manual_run_shown_by_runs_and_the_timeline(db_dsn, db, failed_period):
    r = cli("runs", "rerun", str(failed_period), dsn=db_dsn)
    assert r.code == 0, r.err
    (new,) = db.execute(
        "SELECT run_id FROM scrinalia.archive_run_reruns WHERE rerun_of = %s", (failed_period,)
    ).fetchone()
    assert f"enqueued run #{new} QUEUED (ocr, MANUAL)" in r.out and f"re-run of run #{failed_period}" in r.out
    assert (
        db.execute("SELECT requested_by FROM scrinalia.archive_worker_runs WHERE run_id = %s", (new,))
        .fetchone()[0]
        .startswith("cli:")
    )

    lines = cli("runs", "ocr", dsn=db_dsn).out.splitlines()
    assert f"re-run of #{failed_period}" in next(ln for ln in lines if ln.startswith(f"{new} "))
    assert f"re-run by #{new}" in next(ln for ln in lines if ln.startswith(f"{failed_period} "))
    timeline = cli("runs", "ocr", "--timeline", dsn=db_dsn).out
    assert f"re-run by #{new}" in timeline

    rows = json.loads(cli("runs", "ocr", "--json", dsn=db_dsn).out)
    assert {x["run_id"]: (x["rerun_of"], x["rerun_by"]) for x in rows}[new] == (failed_period, [])
    assert_one_line_error(cli("runs", "rerun", str(new), dsn=db_dsn), 1, "SW011", "it is QUEUED")


def test_runs_rerun_refusals_are_one_line(db_dsn, db, failed_period):
    db.execute("SELECT scrinalia.enqueue('ocr')")
    assert_one_line_error(cli("runs", "rerun", str(failed_period), dsn=db_dsn), 3, "SW010", "busy")
    assert_one_line_error(cli("runs", "rerun", "99999", dsn=db_dsn), 1, "SW011", "no such run")
    assert_one_line_error(cli("runs", "ocr", "12", dsn=db_dsn), 2, "rerun RUN_ID")
    assert_one_line_error(cli("runs", "rerun", "x", dsn=db_dsn), 2)
