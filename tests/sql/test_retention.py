"""scrinalia.prune_runs: old finished runs go, whole retry chains only, never a live one."""

from __future__ import annotations

import psycopg
import pytest

from helpers import (
    claim,
    finish,
    make_worker,
    put_schedule,
    raises_sqlstate,
    set_next_run,
    tick,
)
from scrinalia_workers.admin.migrate import migrate


def age(conn, run_ids, days: int = 40) -> None:
    """Moves runs into the past: the clock is data."""
    conn.execute(
        "UPDATE scrinalia.archive_worker_runs SET created_at = created_at - make_interval(days => %s),"
        " started_at = started_at - make_interval(days => %s),"
        " finished_at = finished_at - make_interval(days => %s) WHERE run_id = ANY (%s)",
        (days, days, days, list(run_ids)),
    )


def manual_run(conn, worker: str, status: str = "SUCCEEDED") -> int:
    run_id = conn.execute("SELECT run_id FROM scrinalia.enqueue(%s, '{}', 'CLI')", (worker,)).fetchone()[0]
    got = claim(conn, workers=[worker])
    assert got[0] == run_id
    finish(conn, run_id, got[1], status, "boom" if status == "FAILED" else None)
    return run_id


def failed_attempt(conn, worker: str) -> int:
    """Claims the worker's claimable run and reports it FAILED; returns its id."""
    got = claim(conn, workers=[worker])
    assert got is not None, "nothing claimable"
    finish(conn, got[0], got[1], "FAILED", "transient")
    return got[0]


def scheduled_chain(conn, worker: str, attempts: int) -> list[int]:
    """A SCHEDULE run that failed `attempts` times, each retry created and made due."""
    put_schedule(conn, worker)
    tick(conn)  # arms
    set_next_run(conn, worker, "1 minute")
    _, decisions = tick(conn)
    assert decisions[0][1] == "ENQUEUED"
    ids = [failed_attempt(conn, worker)]
    while len(ids) < attempts:
        created = conn.execute("SELECT run_id FROM scrinalia.create_retries()").fetchall()
        assert len(created) == 1
        conn.execute(
            "UPDATE scrinalia.archive_worker_runs SET not_before = now() - interval '1 second' WHERE run_id = %s",
            (created[0][0],),
        )
        ids.append(failed_attempt(conn, worker))
    return ids


def existing(conn, run_ids) -> set[int]:
    rows = conn.execute(
        "SELECT run_id FROM scrinalia.archive_worker_runs WHERE run_id = ANY (%s)", (list(run_ids),)
    ).fetchall()
    return {r[0] for r in rows}


def prune(conn, older_than: str = "30 days", batch: int | None = None) -> int:
    if batch is None:
        return conn.execute("SELECT scrinalia.prune_runs(%s::interval)", (older_than,)).fetchone()[0]
    return conn.execute("SELECT scrinalia.prune_runs(%s::interval, %s)", (older_than, batch)).fetchone()[0]


@pytest.mark.parametrize("older_than", ["23 hours 59 minutes", "0", "-30 days"])
def test_refuses_less_than_a_day(db, older_than):
    make_worker(db)
    old = manual_run(db, "ocr")
    age(db, [old])
    with raises_sqlstate("SW002", "at least one day"):
        prune(db, older_than)
    assert existing(db, [old]) == {old}


def test_refuses_null_and_bad_batches(db):
    with raises_sqlstate("SW002", "NULL"):
        db.execute("SELECT scrinalia.prune_runs(NULL)")
    for batch in (2, 0, None):
        with raises_sqlstate("SW002", "batch"):
            db.execute("SELECT scrinalia.prune_runs('30 days', %s)", (batch,))


def test_deletes_old_terminal_runs_and_keeps_recent_and_live_ones(db):
    for w in ("a", "b", "c", "d"):
        make_worker(db, w)
    old = [manual_run(db, "a"), manual_run(db, "a", "FAILED")]
    cancelled = db.execute("SELECT run_id FROM scrinalia.enqueue('b', '{}', 'CLI')").fetchone()[0]
    db.execute("SELECT scrinalia.cancel_run(%s)", (cancelled,))
    recent = manual_run(db, "c")
    queued = db.execute("SELECT run_id FROM scrinalia.enqueue('d', '{}', 'CLI')").fetchone()[0]
    age(db, old + [cancelled, queued])  # a QUEUED run created long ago is still live
    assert prune(db) == 3
    assert existing(db, old + [cancelled, recent, queued]) == {recent, queued}
    assert prune(db) == 0


def test_a_day_boundary_is_honoured(db):
    make_worker(db)
    run = manual_run(db, "ocr")
    age(db, [run], days=10)
    assert prune(db, "11 days") == 0
    assert prune(db, "9 days") == 1


def test_keeps_a_failed_run_whose_retry_is_live(db):
    make_worker(db)
    chain = scheduled_chain(db, "ocr", attempts=1)
    retry = db.execute("SELECT run_id FROM scrinalia.create_retries()").fetchone()[0]
    age(db, chain)
    assert prune(db) == 0  # the retry is QUEUED in its backoff and points to chain[0]
    assert existing(db, chain + [retry]) == set(chain + [retry])


def test_keeps_a_run_that_still_owes_its_retry(db):
    make_worker(db)
    chain = scheduled_chain(db, "ocr", attempts=1)
    assert db.execute(
        "SELECT retry_pending FROM scrinalia.archive_worker_runs WHERE run_id = %s", (chain[0],)
    ).fetchone()[0]
    age(db, chain)
    assert prune(db) == 0
    assert existing(db, chain) == set(chain)
    db.execute("SELECT scrinalia.create_retries()")  # the retry can still point to it
    assert (
        db.execute("SELECT count(*) FROM scrinalia.archive_worker_runs WHERE retry_of = %s", (chain[0],)).fetchone()[0]
        == 1
    )


def test_a_chain_goes_whole_and_only_when_all_of_it_is_old(db):
    make_worker(db)
    chain = scheduled_chain(db, "ocr", attempts=3)
    assert db.execute(
        "SELECT array_agg(attempt ORDER BY run_id) FROM scrinalia.archive_worker_runs WHERE run_id = ANY (%s)", (chain,)
    ).fetchone()[0] == [1, 2, 3]
    age(db, chain[:2])  # the last attempt is recent: the whole chain stays
    assert prune(db) == 0
    assert existing(db, chain) == set(chain)
    age(db, chain[2:])
    assert prune(db) == 3
    assert existing(db, chain) == set()


def test_batches_never_split_a_chain(db):
    make_worker(db)
    make_worker(db, "solo")
    chain = scheduled_chain(db, "ocr", attempts=3)
    singles = [manual_run(db, "solo") for _ in range(2)]
    age(db, chain + singles)
    # oldest first: the 3-row chain fits a batch of 4, the next single would too
    assert prune(db, batch=4) == 4
    assert existing(db, chain) == set()
    assert len(existing(db, singles)) == 1
    assert prune(db, batch=4) == 1
    assert prune(db, batch=4) == 0


def test_a_chain_that_would_cross_the_batch_waits(db):
    make_worker(db)
    make_worker(db, "solo")
    first = manual_run(db, "solo")
    chain = scheduled_chain(db, "ocr", attempts=3)
    age(db, [first] + chain)
    assert prune(db, batch=3) == 1  # the single; 1 + 3 would cross 3
    assert existing(db, chain) == set(chain)
    assert prune(db, batch=3) == 3


def test_operator_may_prune_reader_and_runner_may_not(db_dsn, db, connect_as):
    make_worker(db)
    run = manual_run(db, "ocr")
    age(db, [run])
    for group in ("reader", "runner", "scheduler"):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            prune(connect_as(group))
    assert prune(connect_as("operator")) == 1


def test_grant_survives_a_second_migrate(db_dsn, db):
    migrate(db_dsn)  # 90_roles.sql revokes EXECUTE from PUBLIC after 85 granted
    rows = db.execute(
        "SELECT r, has_function_privilege(r, 'scrinalia.prune_runs(interval, integer)', 'EXECUTE')"
        " FROM unnest(ARRAY['scrinalia_operator', 'scrinalia_reader', 'scrinalia_runner',"
        " 'scrinalia_scheduler', 'public']) r"
    ).fetchall()
    assert dict(rows) == {
        "scrinalia_operator": True,
        "scrinalia_reader": False,
        "scrinalia_runner": False,
        "scrinalia_scheduler": False,
        "public": False,
    }


def test_is_security_definer_with_a_pinned_search_path(db):
    secdef, config = db.execute(
        "SELECT prosecdef, proconfig FROM pg_proc WHERE oid = 'scrinalia.prune_runs(interval, integer)'::regprocedure"
    ).fetchone()
    assert secdef
    assert config == ["search_path=pg_catalog, scrinalia, pg_temp"]


def test_chains_that_must_stay_never_hide_the_ones_after_them_from_a_batch(db):
    # the oldest roots of the ledger are a whole batch of chains that must stay (each
    # an old failed attempt whose retry is live); the old runs after them still go
    kept = []
    for w in ("k1", "k2", "k3", "k4"):
        make_worker(db, w)
        chain = scheduled_chain(db, w, attempts=1)
        kept += chain + [db.execute("SELECT run_id FROM scrinalia.create_retries()").fetchone()[0]]
    make_worker(db, "solo")
    singles = [manual_run(db, "solo") for _ in range(5)]
    age(db, kept + singles)
    removed = [prune(db, batch=3)]  # past the first 3 roots, to the next 3: k4's and two singles
    while removed[-1]:
        removed.append(prune(db, batch=3))
    assert removed == [2, 2, 1, 0]
    assert existing(db, kept + singles) == set(kept)


def _scans_of_the_ledger(conn) -> int:
    """Scans of archive_worker_runs in this transaction so far, by any plan."""
    return conn.execute(
        "SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0) FROM pg_stat_xact_user_tables"
        " WHERE relid = 'scrinalia.archive_worker_runs'::regclass"
    ).fetchone()[0]


def test_a_deleted_run_costs_the_foreign_key_one_question_and_a_retried_one_is_still_refused(db):
    # ON DELETE RESTRICT: for each deleted run the foreign key of retry_of asks whether a
    # retry points to it. NO ACTION (PostgreSQL's default) first asks whether another row
    # now holds the run's key, a second read of the ledger for every run the prune deletes.
    make_worker(db)
    runs = [manual_run(db, "ocr") for _ in range(12)]
    with db.transaction(force_rollback=True):
        before = _scans_of_the_ledger(db)
        assert db.execute("DELETE FROM scrinalia.archive_worker_runs WHERE run_id = ANY (%s)", (runs,)).rowcount == 12
        scans = _scans_of_the_ledger(db) - before
    assert len(runs) <= scans < 2 * len(runs), f"{scans} scans of the ledger to delete {len(runs)} runs"
    # still a foreign key: the run a retry points to cannot go without its retry
    make_worker(db, "chained")
    chain = scheduled_chain(db, "chained", attempts=2)
    # (PostgreSQL 18 reports a RESTRICT refusal as restrict_violation, before it as
    # foreign_key_violation)
    refused = "23001" if db.info.server_version >= 180000 else "23503"
    with raises_sqlstate(refused, "archive_worker_runs_retry_of_fkey"):
        db.execute("DELETE FROM scrinalia.archive_worker_runs WHERE run_id = %s", (chain[0],))
    assert db.execute("DELETE FROM scrinalia.archive_worker_runs WHERE run_id = ANY (%s)", (chain,)).rowcount == 2
