"""Rolling back 0003_schedules_retries would delete every SCHEDULE run: it is refused,
with the count and the way to proceed, before anything is rolled back."""

from __future__ import annotations

import psycopg
import pytest

from helpers import assert_one_line_error, cli, make_worker
from scrinalia_workers.admin import migrate as m


def _schedule_runs(conn, n: int) -> None:
    make_worker(conn, "ocr")
    conn.execute(
        """INSERT INTO scrinalia.archive_worker_runs
                        (worker_name, trigger, status, scheduled_for, finished_at)
                    SELECT 'ocr', 'SCHEDULE', 'SUCCEEDED', now() - i * interval '1 day', now()
                      FROM generate_series(1, %s) i""",
        (n,),
    )


def test_rollback_of_0003_is_refused_while_schedule_runs_exist(empty_db_dsn):
    m.migrate(empty_db_dsn)
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        _schedule_runs(conn, 3)
    with pytest.raises(m.RollbackRefused) as e:
        m.rollback(empty_db_dsn, count=8)
    msg = str(e.value)
    assert "3 SCHEDULE run(s)" in msg and "nothing was rolled back" in msg
    assert "DELETE FROM scrinalia.archive_worker_runs WHERE trigger = 'SCHEDULE'" in msg
    # nothing was rolled back, not even 0009, 0008, 0007, 0006, 0005 and 0004, which come first
    assert m.applied_migrations(empty_db_dsn) == m.head_ids()
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        assert (
            conn.execute("SELECT count(*) FROM scrinalia.archive_worker_runs WHERE trigger = 'SCHEDULE'").fetchone()[0]
            == 3
        )
        conn.execute("DELETE FROM scrinalia.archive_worker_runs WHERE trigger = 'SCHEDULE'")
    assert m.rollback(empty_db_dsn, count=8) == [
        "0010_rerun",
        "0009_metrics_tallies",
        "0008_metrics_indexes",
        "0007_cron_masks",
        "0006_ledger_indexes",
        "0005_health",
        "0004_roles",
        "0003_schedules_retries",
    ]


def test_rolling_back_0004_alone_keeps_the_schedule_runs(empty_db_dsn):
    m.migrate(empty_db_dsn)
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        _schedule_runs(conn, 1)
    assert m.rollback(empty_db_dsn, count=7) == [
        "0010_rerun",
        "0009_metrics_tallies",
        "0008_metrics_indexes",
        "0007_cron_masks",
        "0006_ledger_indexes",
        "0005_health",
        "0004_roles",
    ]
    assert m.migrate(empty_db_dsn) == [
        "0004_roles",
        "0005_health",
        "0006_ledger_indexes",
        "0007_cron_masks",
        "0008_metrics_indexes",
        "0009_metrics_tallies",
        "0010_rerun",
    ]


def test_the_rollback_file_refuses_on_its_own(empty_db_dsn):
    """Belt and braces: the SQL refuses even when run without migrate's check."""
    m.migrate(empty_db_dsn)
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        _schedule_runs(conn, 2)
        sql = (m.paths.migrations_dir() / "0003_schedules_retries.rollback.sql").read_text()
        with pytest.raises(psycopg.errors.RaiseException, match="2 SCHEDULE run"):
            with conn.transaction():
                conn.execute(sql)
        assert conn.execute("SELECT count(*) FROM scrinalia.archive_worker_runs").fetchone()[0] == 2


def test_the_cli_says_it_in_one_line(empty_db_dsn):
    m.migrate(empty_db_dsn)
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        _schedule_runs(conn, 4)
    r = cli("migrate", "--rollback", dsn=empty_db_dsn)
    assert_one_line_error(r, 1, "refusing to roll back 0003_schedules_retries", "4 SCHEDULE run(s)")
    assert m.applied_migrations(empty_db_dsn) == m.head_ids()
