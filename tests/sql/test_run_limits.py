"""Nothing runs for ever: a RUNNING run can be cancelled, and every run has a maximum
run time, past which the scheduler's pass (reap_expired_leases) ends it. Either way its
lease is fenced: the runner's next heartbeat or finish writes nothing and says why."""

from __future__ import annotations

from datetime import timedelta

import pytest

from helpers import claim, make_worker, raises_sqlstate, run_row, scheduled_run, table_fingerprints

HEARTBEAT_RUNS = "SELECT lease_expires_at, lost_reason FROM scrinalia.heartbeat_runs(%s, %s)"
FINISH_RUNS = "SELECT status, lost_reason FROM scrinalia.finish_runs(%s, %s, ARRAY[%s]::scrinalia.run_status[], %s, %s)"


def _running(db, worker="ocr"):
    make_worker(db, worker)
    db.execute("SELECT scrinalia.enqueue(%s)", (worker,))
    run_id, token, *_ = claim(db)
    return run_id, token


def _fenced(db, run_id, token, reason):
    """The runner's every lease call writes nothing and answers `reason` (a prefix)."""
    before = table_fingerprints(db)
    [(expires, lost)] = db.execute(HEARTBEAT_RUNS, ([run_id], [token])).fetchall()
    assert expires is None and lost.startswith(reason), lost
    for status in ("SUCCEEDED", "FAILED", "INTERRUPTED"):
        [(st, lost)] = db.execute(FINISH_RUNS, ([run_id], [token], status, ["late"], [None])).fetchall()
        assert st is None and lost.startswith(reason), lost
    with raises_sqlstate("SW020", reason):
        db.execute("SELECT scrinalia.heartbeat(%s, %s)", (run_id, token))
    with raises_sqlstate("SW020", reason):
        db.execute("SELECT scrinalia.finish(%s, %s, 'SUCCEEDED')", (run_id, token))
    assert db.execute("SELECT run_id FROM scrinalia.release_runs(%s, %s)", ([run_id], [token])).fetchall() == []
    assert table_fingerprints(db) == before


def _reap(db):
    return db.execute("SELECT run_id, status::text, error_fingerprint FROM scrinalia.reap_expired_leases()").fetchall()


# -- cancel a running run --------------------------------------------------------------


def test_cancel_a_running_run_ends_it_at_once_and_fences_its_lease(db):
    run_id, token = _running(db)
    row = db.execute(
        "SELECT status::text, error, lease_token, finished_at IS NOT NULL, duration IS NOT NULL, retry_pending"
        " FROM scrinalia.cancel_run(%s, 'alice')",
        (run_id,),
    ).fetchone()
    assert row == ("CANCELLED", "cancelled by alice while runner r1 ran it", None, True, True, False)
    _fenced(db, run_id, token, "the run is CANCELLED (cancelled by alice while runner r1 ran it)")
    # the slot is free at once
    db.execute("SELECT scrinalia.enqueue('ocr')")


def test_a_cancelled_scheduled_run_is_never_retried(db):
    make_worker(db)
    run_id = scheduled_run(db, "ocr")
    _, token, *_ = claim(db)
    db.execute("SELECT scrinalia.cancel_run(%s, 'alice')", (run_id,))
    assert run_row(db, run_id)["retry_pending"] is False
    assert db.execute("SELECT count(*) FROM scrinalia.create_retries()").fetchone()[0] == 0
    assert db.execute("SELECT count(*) FROM scrinalia.archive_worker_runs").fetchone()[0] == 1
    _fenced(db, run_id, token, "the run is CANCELLED")


def test_cancel_of_a_queued_run_is_unchanged_and_a_finished_run_is_refused(db):
    make_worker(db)
    run_id = db.execute("SELECT run_id FROM scrinalia.enqueue('ocr')").fetchone()[0]
    row = db.execute("SELECT status::text, error, duration FROM scrinalia.cancel_run(%s, 'bob')", (run_id,)).fetchone()
    assert row == ("CANCELLED", "cancelled by bob", None)
    with raises_sqlstate("SW011", f"run #{run_id} cannot be cancelled: it is CANCELLED"):
        db.execute("SELECT scrinalia.cancel_run(%s)", (run_id,))
    with raises_sqlstate("SW011", "no such run"):
        db.execute("SELECT scrinalia.cancel_run(-1)")


# -- the maximum run time -------------------------------------------------------------


def _deadline(db):
    """When the scheduler ends the worker's RUNNING run (worker_agenda), and its start."""
    return db.execute(
        "SELECT active_deadline_at, active_started_at, max_run_time FROM scrinalia.worker_agenda WHERE worker_name = 'ocr'"
    ).fetchone()


def test_every_run_is_held_to_the_default_limit(db):
    _running(db)
    deadline, started, limit = _deadline(db)
    assert db.execute("SELECT scrinalia.default_max_run_time()").fetchone()[0] == limit == timedelta(hours=1)
    assert deadline == started + limit


def _overrun(db, run_id, limit="1 hour"):
    """The run started longer ago than its limit: the clock is data."""
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET started_at = now() - %s::interval - interval '1 minute'"
        " WHERE run_id = %s",
        (limit, run_id),
    )


def test_a_run_past_its_maximum_run_time_is_interrupted_by_the_pass_and_fenced(db):
    run_id, token = _running(db)
    # heartbeated, its lease alive: nothing ends it before its deadline
    db.execute("SELECT scrinalia.heartbeat(%s, %s)", (run_id, token))
    assert _reap(db) == []
    _overrun(db, run_id)
    db.execute("SELECT scrinalia.heartbeat(%s, %s)", (run_id, token))  # (its lease alive still)
    assert _reap(db) == [(run_id, "INTERRUPTED", "max-run-time")]
    row = run_row(db, run_id)
    assert row["error"].startswith("ran longer than its maximum run time of 01:00:00"), row["error"]
    assert row["lease_token"] is None and row["retry_pending"] is False  # (a MANUAL run)
    _fenced(db, run_id, token, "the run is INTERRUPTED (timed out: ran longer than its maximum run time of 01:00:00")
    assert _reap(db) == []


def test_a_scheduled_period_that_timed_out_is_retried(db):
    make_worker(db)
    run_id = scheduled_run(db, "ocr")
    claim(db)
    _overrun(db, run_id)
    assert _reap(db) == [(run_id, "INTERRUPTED", "max-run-time")]
    assert run_row(db, run_id)["retry_pending"] is True
    [(attempt, retry_of)] = db.execute("SELECT attempt, retry_of FROM scrinalia.create_retries()").fetchall()
    assert (attempt, retry_of) == (2, run_id)


def test_a_reaped_lease_says_so_apart_from_a_timeout(db):
    run_id, token = _running(db)
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET lease_expires_at = now() - interval '1 second' WHERE run_id = %s",
        (run_id,),
    )
    assert _reap(db) == [(run_id, "INTERRUPTED", "lease-expired")]
    _fenced(db, run_id, token, "the run is INTERRUPTED (reaped: lease of runner r1 expired at")


def test_the_owner_sets_a_workers_limit_and_its_running_run_is_held_to_it(db):
    run_id, _ = _running(db)
    assert db.execute("SELECT max_run_time, max_run_time_is_default FROM scrinalia.worker_catalogue").fetchone() == (
        timedelta(hours=1),
        True,
    )
    assert db.execute("SELECT scrinalia.set_max_run_time('ocr', '10 minutes')").fetchone()[0] == timedelta(minutes=10)
    deadline, started, _ = _deadline(db)
    assert deadline == started + timedelta(minutes=10)
    assert db.execute("SELECT max_run_time, max_run_time_is_default FROM scrinalia.worker_catalogue").fetchone() == (
        timedelta(minutes=10),
        False,
    )
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET started_at = now() - interval '11 minutes' WHERE run_id = %s",
        (run_id,),
    )
    # (other workers keep the default: an 11-minute run of theirs is left alone)
    other, _ = _running(db, "thumbnails")
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET started_at = now() - interval '11 minutes' WHERE run_id = %s",
        (other,),
    )
    assert _reap(db) == [(run_id, "INTERRUPTED", "max-run-time")]
    assert "maximum run time of 00:10:00" in run_row(db, run_id)["error"]
    # NULL returns it to the default
    assert db.execute("SELECT scrinalia.set_max_run_time('ocr', NULL)").fetchone()[0] == timedelta(hours=1)
    assert db.execute("SELECT count(*) FROM scrinalia.archive_worker_limits").fetchone()[0] == 0


@pytest.mark.parametrize("limit", ["0 seconds", "-1 minute", "8 days"])
def test_a_limit_out_of_bounds_is_refused(db, limit):
    make_worker(db)
    with raises_sqlstate("SW002", "invalid maximum run time", "between 00:00:01 and 7 days"):
        db.execute("SELECT scrinalia.set_max_run_time('ocr', %s::interval)", (limit,))
    with raises_sqlstate("SW001", "unknown worker 'nope'"):
        db.execute("SELECT scrinalia.set_max_run_time('nope', '1 minute')")
