"""A reader's open transaction during a deploy: migrate's re-install of the code waits
for it at most --lock-timeout, in short attempts that never leave other readers (or
`status`) queued behind it for long, then names the session in the way."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import psycopg
import pytest

from helpers import ENV_DB_VARS, cli
from scrinalia_workers.admin import migrate as m
from scrinalia_workers.testkit.waiting import wait_for


def _open_reader(db_dsn: str, login: str) -> psycopg.Connection:
    """A panel's read left open: BEGIN; SELECT count(*) FROM scrinalia.worker_agenda;"""
    conn = psycopg.connect(psycopg.conninfo.make_conninfo(db_dsn, user=login), application_name="panel")
    conn.execute("SELECT count(*) FROM scrinalia.worker_agenda")
    return conn


def _reads_while(db_dsn: str, login: str, running: threading.Event) -> list[float]:
    """Another reader's reads, each timed, for as long as `running` is set."""
    took = []
    with psycopg.connect(psycopg.conninfo.make_conninfo(db_dsn, user=login), autocommit=True) as conn:
        conn.execute("SET statement_timeout = '5s'")
        while running.is_set():
            started = time.monotonic()
            try:
                conn.execute("SELECT worker_name FROM scrinalia.worker_agenda").fetchall()
            except psycopg.errors.QueryCanceled:  # queued behind migrate until its timeout
                pass
            took.append(time.monotonic() - started)
            time.sleep(0.02)
    return took


def _popen_migrate(db_dsn: str, lock_timeout: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ENV_DB_VARS}
    return subprocess.Popen(
        [sys.executable, "-m", "scrinalia_workers", "migrate", "--lock-timeout", lock_timeout, "--dsn", db_dsn],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def test_an_open_read_bounds_migrate_names_the_reader_and_stalls_no_other_reader(db_dsn, role_logins):
    panel = _open_reader(db_dsn, role_logins["reader"])
    running = threading.Event()
    running.set()
    reads: list[float] = []
    other = threading.Thread(target=lambda: reads.extend(_reads_while(db_dsn, role_logins["reader"], running)))
    other.start()
    try:
        started = time.monotonic()
        proc = _popen_migrate(db_dsn, "3")
        try:
            status = cli("status", dsn=db_dsn)  # while migrate retries
            out, err = proc.communicate(timeout=8)  # (the unchanged code waits for ever)
        except subprocess.TimeoutExpired:
            panel.rollback()  # let the old code finish, then fail on its duration
            out, err = proc.communicate(timeout=60)
        took = time.monotonic() - started
    finally:
        running.clear()
        other.join(timeout=30)
    assert took <= 3 + 3, took  # the limit, and the interpreter's start
    assert status.code == 0, status.err
    assert reads and max(reads) < 1.0, max(reads)
    assert proc.returncode == 1, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for fragment in (
        f"pid {panel.info.backend_pid}",
        role_logins["reader"],
        "'panel'",
        "idle in transaction",
        "scrinalia.worker_agenda",
        "--lock-timeout",
    ):
        assert fragment in lines[0], (fragment, lines[0])
    panel.close()


def test_a_read_that_ends_during_the_retries_lets_migrate_finish(db_dsn, role_logins):
    panel = _open_reader(db_dsn, role_logins["reader"])
    result: dict[str, object] = {}

    def run() -> None:
        try:
            result["applied"] = m.migrate(db_dsn, lock_timeout=20)
        except Exception as e:  # noqa: BLE001 - asserted below
            result["error"] = e

    t = threading.Thread(target=run)
    t.start()
    with psycopg.connect(db_dsn, autocommit=True) as watcher:
        # migrate is at the code: its attempts queue on the view the panel holds
        wait_for(
            lambda: watcher.execute(
                "SELECT 1 FROM pg_locks WHERE NOT granted AND relation = 'scrinalia.worker_agenda'::regclass"
            ).fetchone(),
            timeout=20,
            interval=0.01,
            what="migrate waiting on the view",
        )
    panel.rollback()
    t.join(timeout=30)
    assert result == {"applied": []}, result
    panel.close()


@pytest.mark.parametrize("lock_timeout", [0.0, 0.5])
def test_a_short_or_zero_lock_timeout_still_makes_an_attempt_and_names_the_holder(db_dsn, role_logins, lock_timeout):
    panel = _open_reader(db_dsn, role_logins["reader"])
    pid = panel.info.backend_pid
    # (the unchanged code waits for ever: the panel is ended after the bound, and it fails)
    with psycopg.connect(db_dsn, autocommit=True) as admin:
        watchdog = threading.Timer(lock_timeout + 5, lambda: admin.execute("SELECT pg_terminate_backend(%s)", (pid,)))
        watchdog.start()
        started = time.monotonic()
        try:
            with pytest.raises(m.MigrateLockBusy, match=f"pid {pid}"):
                m.migrate(db_dsn, lock_timeout=lock_timeout)
        finally:
            watchdog.cancel()
    assert time.monotonic() - started < lock_timeout + 1
    panel.close()
