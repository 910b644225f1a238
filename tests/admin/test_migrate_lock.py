"""Issue: an outsider holding the migrate lock blocked every deploy forever. Now
migrate waits --lock-timeout seconds, then exits non-zero naming the holder."""

from __future__ import annotations

import time

import psycopg
import pytest

from helpers import assert_one_line_error, cli
from scrinalia_workers.admin import migrate as m


@pytest.fixture
def outsider(empty_db_dsn, role_logins):
    """A login in no scrinalia group, connected to the database to migrate."""
    conn = psycopg.connect(
        psycopg.conninfo.make_conninfo(empty_db_dsn, user=role_logins["nobody"]),
        autocommit=True,
        application_name="squatter",
    )
    yield conn
    conn.close()


def _has_schema(dsn: str, name: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (name,)).fetchone() is not None


def test_an_outsider_holding_the_key_gets_a_bounded_wait_and_is_named(empty_db_dsn, outsider, role_logins):
    outsider.execute("SELECT pg_advisory_lock(%s)", (m.MIGRATE_LOCK_KEY,))
    pid = outsider.info.backend_pid
    started = time.monotonic()
    with pytest.raises(m.MigrateLockBusy) as e:
        m.migrate(empty_db_dsn, lock_timeout=0.5)
    assert time.monotonic() - started < 10
    msg = str(e.value)
    assert f"pid {pid}" in msg and role_logins["nobody"] in msg and "'squatter'" in msg
    assert "connected since" in msg
    assert not _has_schema(empty_db_dsn, "scrinalia")  # nothing was changed

    outsider.execute("SELECT pg_advisory_unlock_all()")
    assert m.migrate(empty_db_dsn, lock_timeout=0.5) == m.head_ids()


def test_the_cli_exits_non_zero_with_one_line_naming_the_holder(empty_db_dsn, outsider, role_logins):
    outsider.execute("SELECT pg_advisory_lock(%s)", (m.MIGRATE_LOCK_KEY,))
    started = time.monotonic()
    r = cli("migrate", "--lock-timeout", "1", dsn=empty_db_dsn)
    assert time.monotonic() - started < 30
    assert_one_line_error(
        r,
        1,
        "holds the migrate lock",
        f"pid {outsider.info.backend_pid}",
        role_logins["nobody"],
        "squatter",
        "--lock-timeout",
    )


def test_the_default_wait_is_bounded(empty_db_dsn):
    from scrinalia_workers.cli.app import build_parser

    args = build_parser().parse_args(["migrate", "--dsn", empty_db_dsn])
    assert 0 < args.lock_timeout <= 300


def test_a_second_migrate_waits_for_the_first_within_the_bound(empty_db_dsn):
    """A migrate holding the lock briefly is waited for, not reported."""
    holder = psycopg.connect(empty_db_dsn, autocommit=True)
    holder.execute("SELECT pg_advisory_lock(%s)", (m.MIGRATE_LOCK_KEY,))
    import threading

    release = threading.Timer(0.5, lambda: holder.execute("SELECT pg_advisory_unlock_all()"))
    release.start()
    try:
        assert m.migrate(empty_db_dsn, lock_timeout=20) == m.head_ids()
    finally:
        release.join()
        holder.close()


def test_a_killed_migrates_yoyo_lock_row_does_not_block_the_next(empty_db_dsn):
    m.migrate(empty_db_dsn)
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:  # what a SIGKILLed migrate leaves
        conn.execute(f"INSERT INTO {m.BOOKKEEPING_SCHEMA}.yoyo_lock (locked, ctime, pid) VALUES (1, now(), 999999)")
    started = time.monotonic()
    assert m.migrate(empty_db_dsn, lock_timeout=5) == []
    assert time.monotonic() - started < 5
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        assert conn.execute(f"SELECT count(*) FROM {m.BOOKKEEPING_SCHEMA}.yoyo_lock").fetchone()[0] == 0


def test_a_yoyo_lock_row_held_by_an_open_transaction_is_waited_for_a_bounded_time(empty_db_dsn):
    m.migrate(empty_db_dsn)
    holder = psycopg.connect(empty_db_dsn)  # a transaction left open on yoyo's lock row
    holder.execute(f"INSERT INTO {m.BOOKKEEPING_SCHEMA}.yoyo_lock (locked, ctime, pid) VALUES (1, now(), 4242)")
    try:
        started = time.monotonic()
        with pytest.raises(m.MigrateLockBusy, match=f"pid {holder.info.backend_pid}"):
            m.migrate(empty_db_dsn, lock_timeout=1)
        assert time.monotonic() - started < 10
    finally:
        holder.rollback()
        holder.close()
    assert m.migrate(empty_db_dsn, lock_timeout=1) == []
