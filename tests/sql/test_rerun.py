"""rerun(): an ended run re-run by hand, as a MANUAL run of the same request linked to
it, held to enqueue's slot rules, never retried, and shown in the history."""

from __future__ import annotations

import pytest
from psycopg.types.json import Jsonb

from helpers import claim, finish, make_worker, raises_sqlstate, run_row, scheduled_run

REQUEST = {"preset": "fast", "options": {"lang": "eng"}}


def _failed_manual_run(db) -> int:
    (run_id,) = db.execute(
        "SELECT run_id FROM scrinalia.enqueue('ocr', %s, 'MANUAL', 'alice')", (Jsonb(REQUEST),)
    ).fetchone()
    r = claim(db)
    finish(db, r[0], r[1], "FAILED", "disk 3 full")
    return run_id


@pytest.fixture
def ocr(db):
    make_worker(db)
    return db


def test_a_failed_run_is_re_run_with_its_request_and_linked_to_it(ocr):
    failed = _failed_manual_run(ocr)
    new = run_row(ocr, ocr.execute("SELECT run_id FROM scrinalia.rerun(%s, 'bob')", (failed,)).fetchone()[0])
    assert new["status"] == "QUEUED" and new["trigger"] == "MANUAL" and new["attempt"] == 1
    assert new["request"] == REQUEST and new["requested_by"] == "bob"
    assert new["config"]["options"]["dpi"] == 150  # resolved anew, from the preset
    hist = {
        r[0]: r[1:]
        for r in ocr.execute("SELECT run_id, rerun_of, rerun_by FROM scrinalia.worker_runs('ocr', 10)").fetchall()
    }
    assert hist == {failed: (None, [new["run_id"]]), new["run_id"]: (failed, [])}
    view = ocr.execute("SELECT rerun_by FROM scrinalia.worker_run_history WHERE run_id = %s", (failed,)).fetchone()[0]
    assert view == [new["run_id"]]


def test_a_failed_scheduled_period_is_re_run_manually_and_shows_in_its_timeline(ocr):
    sched = scheduled_run(ocr, "ocr")
    ocr.execute("SELECT scrinalia.set_schedule_enabled('ocr', false)")  # no next period meanwhile
    r = claim(ocr)
    assert r[0] == sched and finish(ocr, r[0], r[1], "FAILED", "boom")[4] is True
    ocr.execute("SELECT pg_advisory_lock(scrinalia.scheduler_lock_key())")  # the scheduler's session
    [(retry,)] = ocr.execute("SELECT run_id FROM scrinalia.create_retries()").fetchall()
    ocr.execute("SELECT scrinalia.cancel_run(%s)", (retry,))  # the period given up: the slot is free
    new = ocr.execute("SELECT run_id, trigger::text, scheduled_for FROM scrinalia.rerun(%s)", (sched,)).fetchone()
    assert new[1] == "MANUAL" and new[2] is None
    tl = ocr.execute("SELECT run_id, rerun_by FROM scrinalia.worker_timeline('ocr', 5)").fetchall()
    assert tl == [(sched, [new[0]]), (retry, [])]


def test_refused_while_the_slot_is_busy(ocr):
    failed = _failed_manual_run(ocr)
    ocr.execute("SELECT scrinalia.enqueue('ocr')")
    with raises_sqlstate("SW010", "busy"):
        ocr.execute("SELECT scrinalia.rerun(%s)", (failed,))
    assert ocr.execute("SELECT count(*) FROM scrinalia.archive_run_reruns").fetchone()[0] == 0


def test_refused_while_a_retry_is_owed(ocr):
    sched = scheduled_run(ocr, "ocr")
    r = claim(ocr)
    assert finish(ocr, r[0], r[1], "FAILED", "boom")[4] is True  # owes its retry: the slot is taken
    with raises_sqlstate("SW010", "owed its retry"):
        ocr.execute("SELECT scrinalia.rerun(%s)", (sched,))


@pytest.mark.parametrize("state", ["QUEUED", "RUNNING"])
def test_refused_for_a_run_not_ended(ocr, state):
    (run_id,) = ocr.execute("SELECT run_id FROM scrinalia.enqueue('ocr')").fetchone()
    if state == "RUNNING":
        claim(ocr)
    with raises_sqlstate("SW011", f"run #{run_id} cannot be re-run: it is {state}"):
        ocr.execute("SELECT scrinalia.rerun(%s)", (run_id,))


@pytest.mark.parametrize("run_id", [987654, None])
def test_refused_for_an_unknown_run(ocr, run_id):
    with raises_sqlstate("SW011", "cannot be re-run: no such run"):
        ocr.execute("SELECT scrinalia.rerun(%s::bigint)", (run_id,))


def test_a_re_run_that_fails_is_never_retried(ocr):
    failed = _failed_manual_run(ocr)
    (again,) = ocr.execute("SELECT run_id FROM scrinalia.rerun(%s)", (failed,)).fetchone()
    r = claim(ocr)
    assert r[0] == again
    assert finish(ocr, r[0], r[1], "FAILED", "still full")[4] is False
    ocr.execute("SELECT pg_advisory_lock(scrinalia.scheduler_lock_key())")
    assert ocr.execute("SELECT count(*) FROM scrinalia.create_retries()").fetchone()[0] == 0
    assert ocr.execute("SELECT count(*) FROM scrinalia.archive_worker_runs").fetchone()[0] == 2


def test_a_request_the_catalogue_no_longer_accepts_is_refused(ocr):
    failed = _failed_manual_run(ocr)
    ocr.execute("UPDATE scrinalia.archive_workers SET presets = '{}' WHERE worker_name = 'ocr'")  # the preset is gone
    with raises_sqlstate("SW002", "fast"):
        ocr.execute("SELECT scrinalia.rerun(%s)", (failed,))


def test_pruning_the_re_run_run_keeps_the_re_run(ocr):
    failed = _failed_manual_run(ocr)
    (again,) = ocr.execute("SELECT run_id FROM scrinalia.rerun(%s)", (failed,)).fetchone()
    ocr.execute(
        "UPDATE scrinalia.archive_worker_runs SET finished_at = now() - interval '40 days' WHERE run_id = %s", (failed,)
    )
    assert ocr.execute("SELECT scrinalia.prune_runs('30 days')").fetchone()[0] == 1
    assert run_row(ocr, again)["status"] == "QUEUED"
    assert ocr.execute("SELECT rerun_of FROM scrinalia.worker_run_history WHERE run_id = %s", (again,)).fetchone() == (
        None,
    )
    assert ocr.execute("SELECT count(*) FROM scrinalia.archive_run_reruns").fetchone()[0] == 0


def test_the_operator_may_re_run_and_the_reader_may_not(ocr, connect_as):
    failed = _failed_manual_run(ocr)
    with raises_sqlstate("42501"):
        connect_as("reader").execute("SELECT scrinalia.rerun(%s)", (failed,))
    op = connect_as("operator")
    (again,) = op.execute("SELECT run_id FROM scrinalia.rerun(%s)", (failed,)).fetchone()
    assert op.execute(
        "SELECT run_id, rerun_of FROM scrinalia.worker_run_history WHERE rerun_of IS NOT NULL"
    ).fetchall() == [(again, failed)]


def test_the_ledgers_row_type_is_unchanged(ocr):
    # an earlier release's daemon prepared SELECT * FROM claim_next(...): a column more in
    # its result type would fail it ("cached plan must not change result type")
    cols = ocr.execute(
        "SELECT count(*) FROM information_schema.columns"
        " WHERE table_schema = 'scrinalia' AND table_name = 'archive_worker_runs' AND column_name LIKE 'rerun%'"
    ).fetchone()[0]
    assert cols == 0


def test_a_truncate_of_the_ledger_takes_the_links_with_it(ocr):
    failed = _failed_manual_run(ocr)
    ocr.execute("SELECT scrinalia.rerun(%s)", (failed,))
    ocr.execute("TRUNCATE scrinalia.archive_worker_runs")
    assert ocr.execute("SELECT count(*) FROM scrinalia.archive_run_reruns").fetchone()[0] == 0
