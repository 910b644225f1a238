"""The metrics' tallies (sql/86_tallies.sql) answer what counting the ledger answered:
run_counts() and the ledger_counts view, worker_metrics()'s retries and failures, latest_finished_periods(),
compared with the previous release's definitions after every path that changes a
run (enqueue, enqueue_runs, tick, claim, finish, finish_runs, release, lease reaping,
retries, cancel, prune, hand-written rows, TRUNCATE), folded or not, in a read-only
transaction, with writers in other sessions committing around a fold."""

from __future__ import annotations

import random

import psycopg
import pytest
from psycopg.types.json import Jsonb
from test_metrics_periods import OLD_DEFINITION, build_ledger

from helpers import claim, finish, make_worker, put_schedule, set_next_run, tick

# The previous release's run_counts() and retries_created, as they counted.
OLD_COUNTS = (
    "SELECT r.worker_name, r.status::text, r.trigger::text, count(*) "
    "FROM scrinalia.archive_worker_runs r GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"
)
OLD_WORKER = """
SELECT w.worker_name,
       coalesce((SELECT p.last_status IN ('FAILED', 'INTERRUPTED')
                   FROM pg_temp.latest_finished_periods_before() p
                  WHERE p.worker_name = w.worker_name)::int, 0),
       (SELECT count(*) FROM scrinalia.archive_worker_runs r
         WHERE r.worker_name = w.worker_name AND r.retry_of IS NOT NULL),
       (SELECT count(*) FROM scrinalia.archive_worker_runs r
         WHERE r.worker_name = w.worker_name AND r.status = 'QUEUED'
           AND (r.not_before IS NULL OR r.not_before <= now())) > 0
  FROM scrinalia.archive_workers w ORDER BY 1
"""
# what monitoring/queries.yaml reads
LEDGER_COUNTS = "SELECT worker_name, status, trigger, runs FROM scrinalia.ledger_counts ORDER BY 1, 2, 3"
NEW_WORKER = (
    "SELECT worker_name, failed_after_all_attempts, retries_created, oldest_claimable_wait_seconds IS NOT NULL "
    "FROM scrinalia.worker_metrics() ORDER BY 1"
)
TALLIES = (
    "SELECT (SELECT coalesce(array_agg(t ORDER BY t), '{}') FROM scrinalia.run_tally t WHERE t.runs <> 0)::text, "
    "(SELECT coalesce(array_agg(t ORDER BY t), '{}') FROM scrinalia.retry_tally t WHERE t.retries <> 0)::text, "
    "(SELECT coalesce(array_agg(t ORDER BY t), '{}') FROM scrinalia.latest_period_tally t)::text"
)


def same_as_before(conn: psycopg.Connection) -> None:
    """The new readers against the old definitions, first unfolded, then folded."""
    conn.execute(OLD_DEFINITION.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION"))
    # the exporter's view does not fold: the deltas pending, it answers the same
    pending = conn.execute("SELECT count(*) FROM scrinalia.run_tally_delta").fetchone()[0]
    assert conn.execute(LEDGER_COUNTS).fetchall() == conn.execute(OLD_COUNTS).fetchall()
    assert conn.execute("SELECT count(*) FROM scrinalia.run_tally_delta").fetchone()[0] == pending
    periods = "SELECT * FROM {} ORDER BY 1"
    assert (
        conn.execute(periods.format("scrinalia.latest_finished_periods()")).fetchall()
        == conn.execute(periods.format("pg_temp.latest_finished_periods_before()")).fetchall()
    )
    with conn.transaction():
        conn.execute("SET TRANSACTION READ ONLY")  # no fold: the deltas are read as they are
        assert (
            conn.execute("SELECT * FROM scrinalia.run_counts() ORDER BY 1, 2, 3").fetchall()
            == conn.execute(OLD_COUNTS).fetchall()
        )
        assert conn.execute(NEW_WORKER).fetchall() == conn.execute(OLD_WORKER).fetchall()
    assert (
        conn.execute("SELECT * FROM scrinalia.run_counts() ORDER BY 1, 2, 3").fetchall()
        == conn.execute(OLD_COUNTS).fetchall()
    )
    assert conn.execute(NEW_WORKER).fetchall() == conn.execute(OLD_WORKER).fetchall()
    assert (
        conn.execute(periods.format("scrinalia.latest_finished_periods()")).fetchall()
        == conn.execute(periods.format("pg_temp.latest_finished_periods_before()")).fetchall()
    )
    # folded, the tallies are what a rebuild from the ledger makes: no drift
    assert conn.execute("SELECT count(*) FROM scrinalia.run_tally_delta").fetchone()[0] == 0
    assert conn.execute(LEDGER_COUNTS).fetchall() == conn.execute(OLD_COUNTS).fetchall()
    folded = conn.execute(TALLIES).fetchone()
    conn.execute("SELECT scrinalia.rebuild_tallies()")
    assert conn.execute(TALLIES).fetchone() == folded


def scheduled(db, worker: str) -> None:
    make_worker(db, worker)
    put_schedule(db, worker, cron="0 * * * *", tz="UTC")
    set_next_run(db, worker, "1 minute")


def claim_all(db, runner: str = "r1") -> list[tuple]:
    return db.execute(
        "SELECT run_id, lease_token, worker_name FROM scrinalia.claim_runs(%s, '5 minutes'::interval, NULL, 100)",
        (runner,),
    ).fetchall()


def test_every_path_that_writes_a_run(db):
    workers = [f"w{i}" for i in range(6)]
    for w in workers:
        scheduled(db, w)
    make_worker(db, "manual")
    same_as_before(db)

    tick(db)  # a SCHEDULE run each
    db.execute("SELECT scrinalia.enqueue('manual', '{}'::jsonb, 'CLI', 'test')")
    same_as_before(db)

    runs = claim_all(db)
    assert len(runs) == 7
    by_worker = {r[2]: r for r in runs}
    # one finish at a time (the previous release's runner), then a batch
    finish(db, *by_worker["w0"][:2], "FAILED", "boom")
    finish(db, *by_worker["manual"][:2], "SUCCEEDED")
    rest = [by_worker[w] for w in ("w1", "w2", "w3")]
    db.execute(
        "SELECT * FROM scrinalia.finish_runs(%s, %s, %s::scrinalia.run_status[], %s)",
        ([r[0] for r in rest], [r[1] for r in rest], ["FAILED", "SUCCEEDED", "INTERRUPTED"], ["bad", None, "shutdown"]),
    )
    # handed back, then its lease lost to the reaper
    db.execute("SELECT * FROM scrinalia.release_runs(%s, %s)", ([by_worker["w4"][0]], [by_worker["w4"][1]]))
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET lease_expires_at = now() - interval '1 minute' WHERE run_id = %s",
        (by_worker["w5"][0],),
    )
    assert db.execute("SELECT count(*) FROM scrinalia.reap_expired_leases()").fetchone()[0] == 1
    same_as_before(db)

    # the retries owed: created, claimed, failed again, to the last attempt
    for _ in range(2):
        db.execute(
            "UPDATE scrinalia.archive_worker_runs SET not_before = now() - interval '1 second' "
            "WHERE retry_pending OR status = 'QUEUED'"
        )
        db.execute("SELECT * FROM scrinalia.create_retries()")
        db.execute("UPDATE scrinalia.archive_worker_runs SET not_before = NULL WHERE status = 'QUEUED'")
        same_as_before(db)
        for run_id, token, _ in claim_all(db):
            finish(db, run_id, token, "FAILED", "again")
        same_as_before(db)
    failed = db.execute("SELECT count(*) FROM scrinalia.worker_metrics() WHERE failed_after_all_attempts = 1")
    assert failed.fetchone()[0] >= 2
    assert db.execute("SELECT sum(retries_created) FROM scrinalia.worker_metrics()").fetchone()[0] >= 4

    # manual runs in bulk and one cancelled while queued
    db.execute("SELECT * FROM scrinalia.enqueue_runs(ARRAY['manual'], NULL, 'MANUAL', 'test')")
    [(queued,)] = db.execute(
        "SELECT run_id FROM scrinalia.archive_worker_runs WHERE worker_name = 'manual' AND status = 'QUEUED'"
    )
    db.execute("SELECT scrinalia.cancel_run(%s, 'test')", (queued,))
    same_as_before(db)

    # pruned: everything old enough goes, the counts go down with it
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET finished_at = finished_at - interval '40 days' WHERE finished_at IS NOT NULL"
    )
    assert db.execute("SELECT scrinalia.prune_runs(interval '30 days')").fetchone()[0] > 0
    assert db.execute("SELECT count(*) FROM scrinalia.run_tally_delta").fetchone()[0] == 0  # prune folded
    same_as_before(db)


@pytest.mark.parametrize("seed_value", [1, 2])
def test_a_varied_ledger_written_by_hand(db, seed_value):
    rng = random.Random(seed_value)
    build_ledger(db, rng, 60)  # retries, open periods, every status, manual and CLI runs
    same_as_before(db)
    ids = [r[0] for r in db.execute("SELECT run_id FROM scrinalia.archive_worker_runs ORDER BY run_id")]
    # rows changed the way no function does: a finished run requeued, a status rewritten,
    # a retry no longer owed, a run moved to another worker, leaf runs deleted
    for run_id in rng.sample(ids, 15):
        db.execute(
            "UPDATE scrinalia.archive_worker_runs SET status = CASE WHEN status IN ('QUEUED', 'RUNNING') THEN "
            "'CANCELLED'::scrinalia.run_status ELSE 'SUCCEEDED' END, lease_token = NULL, "
            "finished_at = coalesce(finished_at, now()) WHERE run_id = %s",
            (run_id,),
        )
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET retry_pending = false WHERE run_id IN "
        "(SELECT run_id FROM scrinalia.archive_worker_runs WHERE retry_pending LIMIT 3)"
    )
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET worker_name = 'w001' WHERE run_id IN (SELECT run_id FROM "
        "scrinalia.archive_worker_runs WHERE trigger <> 'SCHEDULE' AND worker_name <> 'w001' LIMIT 3)"
    )
    db.execute(
        "DELETE FROM scrinalia.archive_worker_runs r WHERE r.run_id IN (SELECT run_id FROM "
        "scrinalia.archive_worker_runs x WHERE NOT EXISTS (SELECT FROM scrinalia.archive_worker_runs y "
        "WHERE y.retry_of = x.run_id) ORDER BY run_id DESC LIMIT 20)"
    )
    same_as_before(db)
    db.execute("TRUNCATE scrinalia.archive_worker_runs")
    same_as_before(db)
    assert db.execute("SELECT count(*) FROM scrinalia.run_counts()").fetchone()[0] == 0


def test_writers_committing_around_a_fold(db_dsn, db):
    """Deltas of a transaction still open while a fold runs are folded by a later one;
    a fold never waits for a writer, nor a writer for a fold."""
    for w in ("a", "b"):
        scheduled(db, w)
    tick(db)
    runs = {r[2]: r for r in claim_all(db)}
    with psycopg.connect(db_dsn) as writer, psycopg.connect(db_dsn) as reader:
        finish(writer, *runs["a"][:2], "FAILED", "late")  # open, not committed
        reader.execute("SET lock_timeout = '2s'")
        reader.execute("SELECT * FROM scrinalia.worker_metrics()")  # folds without it
        reader.commit()
        finish(db, *runs["b"][:2], "SUCCEEDED")
        with psycopg.connect(db_dsn) as folder:  # a fold in progress: the next caller reads
            folder.execute("SELECT scrinalia.fold_tallies()")
            reader.execute("SELECT * FROM scrinalia.run_counts()")
            reader.commit()
        writer.commit()
    assert db.execute("SELECT count(*) FROM scrinalia.run_tally_delta WHERE 'a' = ANY (worker_names)").fetchone()[0] > 0
    same_as_before(db)


def test_a_read_only_caller_reads_without_folding(db_dsn, db):
    make_worker(db, "ocr")
    db.execute("SELECT scrinalia.enqueue('ocr', %s)", (Jsonb({}),))
    run_id, token = claim(db)[:2]
    finish(db, run_id, token, "SUCCEEDED")
    with psycopg.connect(db_dsn, autocommit=True) as ro:
        ro.execute("SET default_transaction_read_only = on")
        assert ro.execute("SELECT runs FROM scrinalia.run_counts() WHERE status = 'SUCCEEDED'").fetchone()[0] == 1
        assert ro.execute("SELECT retries_created FROM scrinalia.worker_metrics()").fetchone()[0] == 0
    assert db.execute("SELECT count(*) FROM scrinalia.run_tally_delta").fetchone()[0] == 1
    same_as_before(db)


def test_the_exporters_view_is_planned_without_the_deltas_size(db):
    """After a large fold the delta table's statistics still count the rows it deleted,
    until a vacuum: a plan costed on them can cross jit_above_cost, and every scrape
    would pay a compilation meanwhile. ledger_counts reads the deltas through a
    function, so its plan's cost does not grow with them; the same aggregation inline
    does."""
    make_worker(db, "ocr")

    def cost(query: str) -> float:
        return db.execute(f"EXPLAIN (FORMAT JSON) {query}").fetchone()[0][0]["Plan"]["Total Cost"]

    inline = (
        "SELECT d.worker_name, e.status, e.trigger, sum(e.runs) FROM scrinalia.run_tally_delta e"
        " CROSS JOIN LATERAL unnest(e.worker_names) AS d(worker_name) WHERE e.runs <> 0 GROUP BY 1, 2, 3"
    )
    db.execute("ANALYZE scrinalia.run_tally_delta")
    before = {"inline": cost(inline), "view": cost(LEDGER_COUNTS)}
    db.execute(
        "INSERT INTO scrinalia.run_tally_delta (status, trigger, retry, runs, period, worker_names)"
        " SELECT 'SUCCEEDED', 'MANUAL', false, 1, false, ARRAY['ocr'] FROM generate_series(1, 200000)"
    )
    db.execute("ANALYZE scrinalia.run_tally_delta")
    db.execute("DELETE FROM scrinalia.run_tally_delta")  # as a fold does; no vacuum yet
    after = {"inline": cost(inline), "view": cost(LEDGER_COUNTS)}
    assert after["inline"] > before["inline"] + 10_000, (before, after)  # the stale statistics, as set up
    assert after["view"] < before["view"] + 100, (before, after)
    assert db.execute(LEDGER_COUNTS).fetchall() == db.execute(OLD_COUNTS).fetchall() == []


def test_a_rebuild_on_a_ledger_without_statistics_samples_it_first(db):
    """A ledger restored or bulk-loaded has no statistics until autovacuum comes to it,
    and the rebuild holds autovacuum's ANALYZE back with its lock: planned blind, the
    latest period of each worker was a read of a whole index per worker (hours at a few
    million runs). The rebuild samples the ledger before it counts."""
    db.execute("ALTER TABLE scrinalia.archive_worker_runs SET (autovacuum_enabled = false)")
    for i in range(3):
        make_worker(db, f"w{i}")
    db.execute(
        "INSERT INTO scrinalia.archive_worker_runs (worker_name, status, trigger, finished_at)"
        " SELECT 'w' || (g % 3), 'SUCCEEDED', 'MANUAL', now() FROM generate_series(1, 300) AS g"
    )
    stats = "SELECT count(*) FROM pg_stats WHERE schemaname = 'scrinalia' AND tablename = 'archive_worker_runs'"
    assert db.execute(stats).fetchone()[0] == 0  # as set up: no statistics yet
    db.execute("SELECT scrinalia.rebuild_tallies()")
    assert db.execute(stats).fetchone()[0] > 0
    assert db.execute(LEDGER_COUNTS).fetchall() == db.execute(OLD_COUNTS).fetchall()


def test_a_fold_after_a_bulk_load_samples_the_ledger_first(db):
    """The fold recomputes the latest period of every worker a load touched, with probes
    planned from the ledger's statistics: sampled on an empty ledger, a probe may read a
    whole index per worker. A fold covering more runs than fold_sample_threshold() of
    the sampled size samples the ledger first; a small one does not."""
    db.execute("ALTER TABLE scrinalia.archive_worker_runs SET (autovacuum_enabled = false)")
    for i in range(4):
        make_worker(db, f"w{i}")
    db.execute("ANALYZE scrinalia.archive_worker_runs")  # sampled empty, as on the day it was installed
    reltuples = "SELECT reltuples FROM pg_class WHERE oid = 'scrinalia.archive_worker_runs'::regclass"
    load = (
        "INSERT INTO scrinalia.archive_worker_runs (worker_name, status, trigger, scheduled_for, finished_at)"
        " SELECT 'w' || (g %% 4), 'SUCCEEDED', 'SCHEDULE', now() - (%s + g) * interval '1 minute', now()"
        " FROM generate_series(1, %s) AS g"
    )
    threshold = db.execute("SELECT scrinalia.fold_sample_threshold((" + reltuples + "))").fetchone()[0]
    bulk = int(threshold) + 1000
    db.execute(load, (0, bulk))
    assert db.execute(reltuples).fetchone()[0] <= 0  # as set up: the statistics of an empty ledger
    db.execute("SELECT scrinalia.fold_tallies()")
    assert db.execute(reltuples).fetchone()[0] == bulk
    db.execute(load, (bulk, 10))  # a few more: far below the threshold of the sampled size
    db.execute("SELECT scrinalia.fold_tallies()")
    assert db.execute(reltuples).fetchone()[0] == bulk  # not sampled again
    assert db.execute("SELECT count(*) FROM scrinalia.run_tally_delta").fetchone()[0] == 0
    assert db.execute(LEDGER_COUNTS).fetchall() == db.execute(OLD_COUNTS).fetchall()
    same_as_before(db)
