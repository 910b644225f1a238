"""Migrations: apply to an empty database, idempotence, rollback, the enum value."""

from __future__ import annotations

import threading

import psycopg
from yoyo import read_migrations

from helpers import migrations_from
from scrinalia_workers import sqlfiles as paths
from scrinalia_workers.admin import migrate as m

HEAD = [
    "0001_ledger",
    "0002_trigger_schedule",
    "0003_schedules_retries",
    "0004_roles",
    "0005_health",
    "0006_ledger_indexes",
    "0007_cron_masks",
    "0008_metrics_indexes",
    "0009_metrics_tallies",
    "0010_run_catch_up",
    "0011_run_limits",
    "0012_rerun",
    "0013_alerts_retention",
    "0014_runner_stalls",
    "0015_run_catch_up_column",
    "0016_period_lateness",
    "0017_schedule_configs",
    "0018_retry_of_restrict",
]


def _count(dsn: str, sql: str, *args) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(sql, args).fetchone()[0]


def _functions(dsn: str) -> int:
    return _count(
        dsn,
        "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'scrinalia'",
    )


def test_applies_every_migration_to_an_empty_database(empty_db_dsn):
    assert m.migrate(empty_db_dsn) == HEAD
    assert m.applied_migrations(empty_db_dsn) == HEAD
    assert _functions(empty_db_dsn) > 30
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT scrinalia.schema_head()").fetchone()[0] == paths.head() == HEAD[-1]


def test_migrate_is_idempotent_and_reinstalls_the_code(empty_db_dsn):
    m.migrate(empty_db_dsn)
    n = _functions(empty_db_dsn)
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        # a function left by an older release must not survive the next migrate
        conn.execute("CREATE FUNCTION scrinalia.obsolete_thing() RETURNS int LANGUAGE sql AS 'SELECT 1'")
    assert m.migrate(empty_db_dsn) == []
    assert _functions(empty_db_dsn) == n
    assert _count(empty_db_dsn, "SELECT count(*) FROM pg_proc WHERE proname = 'obsolete_thing'") == 0


def test_rolls_back_cleanly_and_applies_again(empty_db_dsn):
    m.migrate(empty_db_dsn)
    assert m.rollback(empty_db_dsn) == list(reversed(HEAD))
    assert _count(empty_db_dsn, "SELECT count(*) FROM pg_namespace WHERE nspname = 'scrinalia'") == 0
    assert m.applied_migrations(empty_db_dsn) == []
    assert m.migrate(empty_db_dsn) == HEAD
    assert _functions(empty_db_dsn) > 30


def test_partial_rollback_then_forward(empty_db_dsn):
    m.migrate(empty_db_dsn)
    assert (
        m.rollback(empty_db_dsn, count=len(migrations_from("0003_schedules_retries")))
        == (migrations_from("0003_schedules_retries")[::-1])
    )
    cols = _count(
        empty_db_dsn,
        "SELECT count(*) FROM information_schema.columns WHERE table_schema = 'scrinalia' "
        "AND table_name = 'archive_worker_runs' AND column_name IN ('attempt', 'not_before')",
    )
    assert cols == 0
    assert m.migrate(empty_db_dsn) == migrations_from("0003_schedules_retries")


def test_schedule_enum_value_is_added_outside_a_transaction_and_usable(empty_db_dsn):
    migrations = read_migrations(str(paths.migrations_dir()))
    by_id = {x.id: x for x in migrations}
    by_id["0002_trigger_schedule"].load()
    assert by_id["0002_trigger_schedule"].use_transactions is False
    m.migrate(empty_db_dsn)
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        labels = [r[0] for r in conn.execute("SELECT unnest(enum_range(NULL::scrinalia.run_trigger))::text").fetchall()]
        assert labels == ["MANUAL", "CLI", "SCHEDULE"]


def test_existing_runs_read_attempt_1_after_the_adr_0015_migration(empty_db_dsn):
    with m._migrating(empty_db_dsn, lock_timeout=10) as (_conn, backend, migrations):
        backend.apply_migrations(migrations.filter(lambda x: x.id in HEAD[:2]))
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO scrinalia.archive_workers (worker_name) VALUES ('old')")
        conn.execute(
            "INSERT INTO scrinalia.archive_worker_runs (worker_name, trigger, status, finished_at) "
            "VALUES ('old', 'MANUAL', 'SUCCEEDED', now())"
        )
    assert m.migrate(empty_db_dsn) == HEAD[2:]
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT attempt, retry_of, not_before, scheduled_for FROM scrinalia.archive_worker_runs"
        ).fetchone()
    assert row == (1, None, None, None)


def test_concurrent_migrates_of_one_database_both_succeed(empty_db_dsn):
    results, errors = [], []

    def go():
        try:
            results.append(m.migrate(empty_db_dsn))
        except Exception as e:  # noqa: BLE001 - the assertion below reports it
            errors.append(e)

    threads = [threading.Thread(target=go) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(results, key=len) == [[], HEAD]


def test_a_database_migrated_by_the_previous_release_keeps_its_history(empty_db_dsn):
    """The previous release left yoyo's tables in `public`: they move into our schema,
    nothing is applied twice."""
    m.migrate(empty_db_dsn)
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        for t in m.YOYO_TABLES:
            conn.execute(f"ALTER TABLE {m.BOOKKEEPING_SCHEMA}.{t} SET SCHEMA public")
        conn.execute(f"DROP SCHEMA {m.BOOKKEEPING_SCHEMA}")
    assert m.migrate(empty_db_dsn) == []
    assert m.applied_migrations(empty_db_dsn) == HEAD
    assert (
        _count(empty_db_dsn, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename LIKE '%%yoyo%%'")
        == 0
    )
