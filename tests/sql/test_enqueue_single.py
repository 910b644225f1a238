"""enqueue(): no subtransaction per call, and a slot taken meanwhile still answers SW010."""

from __future__ import annotations

import threading

import psycopg

from helpers import make_workers, raises_sqlstate, waiting_on_a_lock
from scrinalia_workers.testkit.waiting import wait_for


def next_xid(conn) -> int:
    with conn.transaction():
        return conn.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()[0]


def test_calls_in_one_transaction_take_no_transaction_id_each(db):
    # an EXCEPTION block around the insert made each call a subtransaction with an XID
    # of its own, locked until the end of the transaction
    workers = make_workers(db, 200)
    before = next_xid(db)
    with db.transaction():
        for w in workers:
            db.execute("SELECT scrinalia.enqueue(%s)", (w,))
    assert next_xid(db) - before < 20
    assert db.execute("SELECT count(*) FROM scrinalia.archive_worker_runs").fetchone()[0] == 200


def test_a_run_committed_while_the_insert_waits_answers_slot_busy_naming_it(db, connect_as):
    make_workers(db, 1)
    first = connect_as("operator")
    first.autocommit = False
    run_id = first.execute("SELECT run_id FROM scrinalia.enqueue('w00000')").fetchone()[0]
    second = connect_as("operator")
    pid = second.execute("SELECT pg_backend_pid()").fetchone()[0]
    outcome = []

    def go():
        try:
            second.execute("SELECT scrinalia.enqueue('w00000')")
            outcome.append("ok")
        except psycopg.Error as e:
            outcome.append((e.sqlstate, e.diag.message_primary))

    t = threading.Thread(target=go)
    t.start()
    wait_for(
        lambda: waiting_on_a_lock(db, pid),
        timeout=10,
        what="the second enqueue waits on the first's insert",
    )
    first.commit()
    t.join(timeout=10)
    assert outcome == [("SW010", f"worker 'w00000' is busy: run #{run_id} QUEUED (MANUAL)")]


def test_under_repeatable_read_a_run_its_snapshot_cannot_see_answers_slot_busy(db, db_dsn, connect_as):
    make_workers(db, 1)
    rr = connect_as("operator")
    rr.autocommit = False
    rr.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    rr.execute("SELECT 1")  # the snapshot: no run yet
    db.execute("SELECT scrinalia.enqueue('w00000')")
    with raises_sqlstate("SW010", "worker 'w00000' is busy: a concurrent run"):
        rr.execute("SELECT scrinalia.enqueue('w00000')")
    rr.rollback()
    db.execute("SELECT scrinalia.cancel_run(max(run_id), 'test') FROM scrinalia.archive_worker_runs")
    rr.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    rr.execute("SELECT 1")  # the slot is free in this snapshot
    db.execute("SELECT scrinalia.enqueue('w00000')")
    with raises_sqlstate("SW010", "enqueue #1 (worker 'w00000'): worker 'w00000' is busy: a concurrent run"):
        rr.execute("SELECT * FROM scrinalia.enqueue_runs(ARRAY['w00000'])")
    rr.rollback()


def test_a_long_transaction_on_a_ledger_analyzed_empty_never_scans_the_ledger(db):
    # the slot's description is planned once per session: planned while the statistics
    # said the ledger was empty, a sequential scan made each call slower than the last
    workers = make_workers(db, 60)
    db.execute("VACUUM ANALYZE scrinalia.archive_worker_runs")
    with db.transaction():
        for w in workers:
            db.execute("SELECT scrinalia.enqueue(%s)", (w,))
        scans = db.execute(
            "SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relid = 'scrinalia.archive_worker_runs'::regclass"
        ).fetchone()[0]
    assert scans < 10
