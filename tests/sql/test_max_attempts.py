"""max_attempts() is the one home of the retry bound: replaced (here by 5, in this test's
own database), a scheduled period is tried five times, labelled n/5, and pruned whole;
no CHECK, view or retention query restates the number."""

from __future__ import annotations

from helpers import claim, finish, make_worker, put_schedule, set_next_run, tick

MOST = 5


def _set_max_attempts(db, n: int) -> None:
    db.execute(
        "CREATE OR REPLACE FUNCTION scrinalia.max_attempts() RETURNS integer"
        " LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp"
        f" AS $$ BEGIN RETURN {int(n)}; END $$"
    )


def _period(db, worker: str) -> None:
    make_worker(db, worker)
    put_schedule(db, worker, "0 3 * * *", "UTC")
    tick(db, only=[worker])
    set_next_run(db, worker, "1 minute")
    tick(db, only=[worker])


def _fail_every_attempt(db, worker: str, until: int) -> list[int]:
    """Claims and fails the worker's attempts 1..until, each retry made due at once."""
    ids = []
    for attempt in range(1, until + 1):
        run_id, token, _, got, _ = claim(db, workers=[worker])
        assert got == attempt
        ids.append(run_id)
        status, *_, pending = finish(db, run_id, token, "FAILED", f"attempt {attempt} failed")
        assert (status, pending) == ("FAILED", attempt < MOST)
        retries = db.execute("SELECT run_id, retry_of, attempt FROM scrinalia.create_retries()").fetchall()
        if attempt < MOST:
            assert [(r[1], r[2]) for r in retries] == [(run_id, attempt + 1)]
            db.execute(
                "UPDATE scrinalia.archive_worker_runs SET not_before = now() WHERE run_id = %s", (retries[0][0],)
            )
        else:
            assert retries == []
    return ids


def test_a_period_walks_every_attempt_of_a_raised_policy_and_is_pruned_whole(db):
    _set_max_attempts(db, MOST)
    _period(db, "ocr")
    ids = _fail_every_attempt(db, "ocr", MOST)
    rows = db.execute(
        "SELECT attempt, status::text, attempt_label FROM scrinalia.worker_timeline('ocr', 10)"
    ).fetchall()
    assert rows == [(n, "FAILED", f"{n}/{MOST}") for n in range(1, MOST + 1)]
    # nothing owed any more: the slot is free for the next period
    assert db.execute("SELECT count(*) FROM scrinalia.archive_worker_runs WHERE retry_pending").fetchone()[0] == 0

    # a second period whose last attempt still runs: its chain must stay whole
    _period(db, "live")
    _fail_every_attempt(db, "live", MOST - 1)
    claim(db, workers=["live"])
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET finished_at = now() - interval '40 days' WHERE finished_at IS NOT NULL"
    )
    # the batch is the chain's length: it goes whole in one call, not in parts
    assert db.execute("SELECT scrinalia.prune_runs(interval '30 days', %s)", (MOST,)).fetchone()[0] == MOST
    assert db.execute("SELECT scrinalia.prune_runs(interval '30 days', %s)", (MOST,)).fetchone()[0] == 0
    left = db.execute("SELECT worker_name, count(*) FROM scrinalia.archive_worker_runs GROUP BY 1").fetchall()
    assert left == [("live", MOST)]
    assert (
        db.execute("SELECT count(*) FROM scrinalia.archive_worker_runs WHERE run_id = ANY (%s)", (ids,)).fetchone()[0]
        == 0
    )


def test_a_lowered_policy_stops_the_chain_earlier(db):
    _set_max_attempts(db, 2)
    _period(db, "ocr")
    run_id, token, *_ = claim(db, workers=["ocr"])
    finish(db, run_id, token, "FAILED", "first")
    [(retry_id, _, _, attempt, _)] = db.execute("SELECT * FROM scrinalia.create_retries()").fetchall()
    assert attempt == 2
    db.execute("UPDATE scrinalia.archive_worker_runs SET not_before = now() WHERE run_id = %s", (retry_id,))
    run_id, token, *_ = claim(db, workers=["ocr"])
    assert finish(db, run_id, token, "FAILED", "second")[-1] is False  # the last: no retry owed
    assert db.execute("SELECT count(*) FROM scrinalia.create_retries()").fetchone()[0] == 0
