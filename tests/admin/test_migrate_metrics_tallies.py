"""0009_metrics_tallies: rolled back, the ledger is the previous release's (no trigger, no
tally left); runs written meanwhile, by hand or by that release, are counted again by
the next migrate, which installs the triggers again and rebuilds the tallies from the
ledger: no drift. A migrate that finds the triggers installed leaves the ledger alone."""

from __future__ import annotations

import psycopg
import pytest

from helpers import two_attempt_period
from scrinalia_workers.admin import migrate as m

TALLY_OBJECTS = (
    "SELECT (SELECT count(*) FROM pg_trigger WHERE tgrelid = 'scrinalia.archive_worker_runs'::regclass "
    "AND tgname LIKE 'tally%%'), "
    "(SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname = 'scrinalia' AND c.relname LIKE '%%tally%%')"
)
COUNTS = "SELECT * FROM scrinalia.run_counts() ORDER BY 1, 2, 3"
LEDGER = (
    "SELECT worker_name, status::text, trigger::text, count(*) FROM scrinalia.archive_worker_runs "
    "GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"
)
RETRIES = "SELECT worker_name, retries_created, failed_after_all_attempts FROM scrinalia.worker_metrics() ORDER BY 1"


def _runs(c, status: str, n: int) -> None:
    c.execute(
        "INSERT INTO scrinalia.archive_worker_runs (worker_name, trigger, status, finished_at) "
        "SELECT 'ocr', 'MANUAL', %s::scrinalia.run_status, now() FROM generate_series(1, %s)",
        (status, n),
    )


def test_rolled_back_and_upgraded_again_the_tallies_are_rebuilt(empty_db_dsn):
    m.migrate(empty_db_dsn)
    with psycopg.connect(empty_db_dsn, autocommit=True) as c:
        assert c.execute(TALLY_OBJECTS).fetchone() == (4, 9)  # 4 triggers; 5 tables, 4 primary keys
        two_attempt_period(c, "FAILED", "boom")
        c.execute(
            "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone) VALUES ('ocr', '0 * * * *', 'UTC')"
        )
        _runs(c, "SUCCEEDED", 3)
        assert c.execute(COUNTS).fetchall() == c.execute(LEDGER).fetchall()
        c.execute("SELECT * FROM scrinalia.worker_metrics()")  # folded into the tallies
        assert c.execute("SELECT count(*) FROM scrinalia.run_tally").fetchone()[0] > 0

    assert m.rollback(empty_db_dsn, count=2) == ["0010_rerun", "0009_metrics_tallies"]
    with psycopg.connect(empty_db_dsn, autocommit=True) as c:
        assert c.execute(TALLY_OBJECTS).fetchone() == (0, 0)
        # the previous release meanwhile: runs finished, cancelled, deleted, none seen by a trigger
        _runs(c, "CANCELLED", 2)
        c.execute("UPDATE scrinalia.archive_worker_runs SET status = 'INTERRUPTED' WHERE status = 'SUCCEEDED'")
        c.execute(
            "DELETE FROM scrinalia.archive_worker_runs WHERE run_id = (SELECT max(run_id) FROM scrinalia.archive_worker_runs)"
        )

    assert m.migrate(empty_db_dsn) == ["0009_metrics_tallies", "0010_rerun"]
    with psycopg.connect(empty_db_dsn, autocommit=True) as c:
        assert c.execute(COUNTS).fetchall() == c.execute(LEDGER).fetchall()
        assert c.execute(RETRIES).fetchall() == [("idle", 0, 0), ("ocr", 1, 1)]
        # a migrate that finds the triggers installed leaves the ledger's writers alone;
        # rows written with the triggers off (a restore, session_replication_role =
        # replica) are the owner's rebuild_tallies() to count again
        c.execute("SET session_replication_role = replica")
        _runs(c, "FAILED", 4)
        c.execute("RESET session_replication_role")
        assert c.execute(COUNTS).fetchall() != c.execute(LEDGER).fetchall()
    assert m.migrate(empty_db_dsn) == []
    with psycopg.connect(empty_db_dsn, autocommit=True) as c:
        assert c.execute(COUNTS).fetchall() != c.execute(LEDGER).fetchall()
        c.execute("SELECT scrinalia.rebuild_tallies()")
        assert c.execute(COUNTS).fetchall() == c.execute(LEDGER).fetchall()


def test_a_migrate_with_the_triggers_installed_takes_no_lock_on_the_ledger(empty_db_dsn):
    """A writer left idle in its transaction holds a lock no rebuild could take: the
    migrate that finds the triggers in place does not try, and finishes at once."""
    m.migrate(empty_db_dsn)
    with psycopg.connect(empty_db_dsn, autocommit=True) as c:
        c.execute("INSERT INTO scrinalia.archive_workers (worker_name) VALUES ('ocr')")
    with psycopg.connect(empty_db_dsn) as idle:
        _runs(idle, "SUCCEEDED", 1)  # ROW EXCLUSIVE on the ledger, held
        assert m.migrate(empty_db_dsn, lock_timeout=10) == []
        idle.commit()


def test_a_rebuild_that_cannot_lock_fails_and_says_why(empty_db_dsn):
    m.migrate(empty_db_dsn)
    with psycopg.connect(empty_db_dsn, autocommit=True) as c:
        c.execute("INSERT INTO scrinalia.archive_workers (worker_name) VALUES ('ocr')")
    with psycopg.connect(empty_db_dsn) as idle:
        _runs(idle, "SUCCEEDED", 1)
        with psycopg.connect(empty_db_dsn, autocommit=True) as c:
            with pytest.raises(psycopg.errors.LockNotAvailable, match="not rebuilt: the ledger stayed locked"):
                c.execute("SELECT scrinalia.rebuild_tallies()")
        idle.rollback()
        idle.execute("SELECT * FROM scrinalia.worker_metrics()")  # folded: holds the fold
        with psycopg.connect(empty_db_dsn, autocommit=True) as c:
            with pytest.raises(psycopg.errors.LockNotAvailable, match="a session holds their fold"):
                c.execute("SELECT scrinalia.rebuild_tallies()")
        idle.rollback()


def test_a_session_left_open_does_not_hold_the_migrate(empty_db_dsn):
    """A transaction left open after a fold, or after a write to the ledger: the migrate
    keeps the tallies as the triggers maintain them and finishes, rather than waiting for
    that session (and holding every writer of the ledger queued behind its lock)."""
    m.migrate(empty_db_dsn)
    with psycopg.connect(empty_db_dsn, autocommit=True) as c:
        c.execute("INSERT INTO scrinalia.archive_workers (worker_name) VALUES ('ocr')")
        _runs(c, "SUCCEEDED", 2)
    with psycopg.connect(empty_db_dsn) as idle:
        idle.execute("SET lock_timeout = '30s'")  # (the migrate must not be what waits)
        idle.execute("SELECT * FROM scrinalia.worker_metrics()")  # folded: holds the fold
        with psycopg.connect(empty_db_dsn, autocommit=True) as w:
            _runs(w, "FAILED", 1)
        assert m.migrate(empty_db_dsn, lock_timeout=10) == []
        idle.rollback()
        idle.execute("UPDATE scrinalia.archive_worker_runs SET error = 'x' WHERE status = 'FAILED'")  # a writer
        assert m.migrate(empty_db_dsn, lock_timeout=10) == []
        idle.rollback()
    with psycopg.connect(empty_db_dsn, autocommit=True) as c:
        assert c.execute(COUNTS).fetchall() == c.execute(LEDGER).fetchall()
        assert c.execute(COUNTS).fetchall() == [("ocr", "FAILED", "MANUAL", 1), ("ocr", "SUCCEEDED", "MANUAL", 2)]
