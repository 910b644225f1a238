"""The ledger functions the runner owns: finish() takes INTERRUPTED from the lease
holder (a runner shutting down) with the reaper's retry rule; the fence still holds."""

from __future__ import annotations

import pytest

from helpers import claim, finish, make_worker, raises_sqlstate, run_row, scheduled_run


def _at_attempt(db, worker, attempt):
    """A SCHEDULE run of this attempt, reached the real way: fail, retry, again."""
    run_id = scheduled_run(db, worker)
    for _ in range(attempt - 1):
        token = claim(db, workers=[worker])[1]
        finish(db, run_id, token, "FAILED", "boom")
        run_id = [
            r[0] for r in db.execute("SELECT run_id, worker_name FROM scrinalia.create_retries()") if r[1] == worker
        ][0]
        db.execute("UPDATE scrinalia.archive_worker_runs SET not_before = now() WHERE run_id = %s", (run_id,))
    return run_id


def _reaped(db, run_id):
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET lease_expires_at = now() - interval '1 second' WHERE run_id = %s",
        (run_id,),
    )
    db.execute("SELECT scrinalia.reap_expired_leases()")
    return run_row(db, run_id)["retry_pending"]


@pytest.mark.parametrize("attempt", [1, 2, 3])
def test_interrupted_by_the_holder_follows_the_reapers_retry_rule(db, attempt):
    make_worker(db, "a")
    make_worker(db, "b")
    for w in ("a", "b"):
        _at_attempt(db, w, attempt)
    ra, rb = claim(db, workers=["a"]), claim(db, workers=["b"])
    assert ra[3] == rb[3] == attempt
    got = finish(db, ra[0], ra[1], "INTERRUPTED", "runner shut down")
    assert got[0] == "INTERRUPTED" and got[1] == "runner shut down"
    max_attempts = db.execute("SELECT scrinalia.max_attempts()").fetchone()[0]
    assert got[4] is (attempt < max_attempts)
    assert got[4] is _reaped(db, rb[0])  # the same decision a reaped lease gets


def test_interrupted_manual_run_is_not_retried(db):
    make_worker(db, "m")
    db.execute("SELECT scrinalia.enqueue('m')")
    run_id, token, *_ = claim(db)
    status, error, fp, duration, retry = finish(db, run_id, token, "INTERRUPTED")
    assert (status, retry) == ("INTERRUPTED", False)
    assert error == "interrupted without an error text" and fp and duration is not None


def test_a_scheduled_interrupt_notifies_the_scheduler(db, db_dsn):
    import psycopg

    make_worker(db, "n")
    run_id = scheduled_run(db, "n")
    token = claim(db)[1]
    with psycopg.connect(db_dsn, autocommit=True) as listener:
        listener.execute("LISTEN scrinalia_scheduler")
        finish(db, run_id, token, "INTERRUPTED", "runner shut down")
        got = [n.payload for n in listener.notifies(timeout=5, stop_after=1)]
    assert got == ["retry"]


@pytest.mark.parametrize("status", ["QUEUED", "RUNNING", "CANCELLED"])
def test_other_statuses_are_refused(db, status):
    make_worker(db, "x")
    db.execute("SELECT scrinalia.enqueue('x')")
    run_id, token, *_ = claim(db)
    with raises_sqlstate("SW021", "SUCCEEDED or FAILED (or INTERRUPTED when it shuts down)"):
        finish(db, run_id, token, status)
    assert run_row(db, run_id)["status"] == "RUNNING"


def test_interrupt_is_fenced_like_any_report(db):
    make_worker(db, "f")
    db.execute("SELECT scrinalia.enqueue('f')")
    run_id, token, *_ = claim(db)
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET lease_expires_at = now() - interval '1 second' WHERE run_id = %s",
        (run_id,),
    )
    with raises_sqlstate("SW020", "lease expired"):
        finish(db, run_id, token, "INTERRUPTED", "runner shut down")
    assert run_row(db, run_id)["status"] == "RUNNING"  # left to the reaper


def test_the_runner_role_may_interrupt(db, connect_as):
    make_worker(db, "r")
    db.execute("SELECT scrinalia.enqueue('r')")
    runner = connect_as("runner")
    run_id, token, *_ = claim(runner)
    assert finish(runner, run_id, token, "INTERRUPTED", "runner shut down")[0] == "INTERRUPTED"


def test_an_interrupted_scheduled_run_keeps_the_slot_for_its_retry(db):
    # DESIGN: the retry owns the worker's slot from the moment its predecessor ends
    # FAILED or INTERRUPTED, scheduler running or not; a runner's INTERRUPTED too
    make_worker(db, "s")
    run_id = scheduled_run(db, "s")
    token = claim(db)[1]
    finish(db, run_id, token, "INTERRUPTED", "runner shut down")
    with raises_sqlstate("SW010", "owed its retry"):
        db.execute("SELECT scrinalia.enqueue('s')")
