"""The documented least-privilege install (docs/operate.md): the schema's owner is the
database owner, neither superuser nor member of pg_signal_backend. A frozen scheduler is
replaced there all the same, a standby says why it cannot end a squatter, and migrate
names the grant that would let it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psycopg
import pytest

from helpers import YEARLY, make_workers
from scrinalia_workers.scheduler.leadership import SESSIONS_ENDED
from scrinalia_workers.scheduler.sessions import KEEPALIVE_EVERY

pytestmark = pytest.mark.slow

OWNER = "sw_lp_owner"
KEY = 7305764011424514049  # scrinalia.scheduler_lock_key(): public knowledge


def _as(dsn: str, login: str) -> str:
    return psycopg.conninfo.make_conninfo(dsn, user=login)


@pytest.fixture
def lp_dsn(admin, admin_dsn, template_db, role_logins):
    """A database owned by a plain login, migrated by it through the command line: the
    dsn as that owner, and migrate's stderr."""
    if not admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (OWNER,)).fetchone():
        admin.execute(f"CREATE ROLE {OWNER} LOGIN")
    name = f"sw_lp_{os.getpid()}"
    admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.execute(f'CREATE DATABASE "{name}" OWNER {OWNER}')
    dsn = _as(psycopg.conninfo.make_conninfo(admin_dsn, dbname=name), OWNER)
    r = subprocess.run(
        [sys.executable, "-m", "scrinalia_workers", "migrate", "--dsn", dsn],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    yield dsn, r.stderr
    admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_migrate_names_the_grant_a_standby_needs(lp_dsn):
    _, stderr = lp_dsn
    lines = [x for x in stderr.splitlines() if "pg_signal_backend" in x]
    assert len(lines) == 1 and f"GRANT pg_signal_backend TO {OWNER}" in lines[0], stderr
    assert "Traceback" not in stderr


def test_a_frozen_holder_is_replaced_without_the_grant(lp_dsn, role_logins, procs):
    dsn, _ = lp_dsn
    sched = _as(dsn, role_logins["scheduler"])
    with psycopg.connect(dsn, autocommit=True) as owner:
        assert owner.execute("SELECT NOT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()[0]
        owner.execute("INSERT INTO scrinalia.settings (name, value) VALUES ('SCHEDULER_STALE_AFTER', '2 seconds')")
        workers = make_workers(owner, 3, "f")
        owner.execute(
            "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone)"
            " SELECT w, %s, 'UTC' FROM unnest(%s::text[]) w",
            (YEARLY, workers),
        )
    # a squatter first: this install cannot end it, and the standby says why
    squatter = psycopg.connect(_as(dsn, role_logins["nobody"]), autocommit=True, application_name="squatter")
    assert squatter.execute("SELECT pg_try_advisory_lock(%s)", (KEY,)).fetchone()[0]
    a = procs.scheduler(sched, "--standby-retry", "0.3", "--max-sleep", "0.3", "--name", "a")
    ev = a.wait_event("standby", level="error")
    assert "NOT a scheduler" in ev["reason"] and f"GRANT pg_signal_backend TO {OWNER}" in ev["reason"]
    assert ev["holder_role"] == role_logins["nobody"]
    squatter.close()
    a.wait_event("lock acquired")
    assert a.count("standby") == 1  # said once, not at every attempt

    b = procs.scheduler(sched, "--standby-retry", "0.3", "--max-sleep", "0.3", "--name", "b")
    b.wait_event("standby")
    os.kill(a.pid, signal.SIGSTOP)
    frozen = time.monotonic()
    b.wait_event("lock acquired", timeout=15)
    took = time.monotonic() - frozen
    assert b.count("stale holder evicted") == 0  # nothing was ended: the sessions ended themselves
    a_resumed = a.mark()
    os.kill(a.pid, signal.SIGCONT)
    lost = a.wait_event("lock lost", since=a_resumed)
    assert SESSIONS_ENDED in lost["reason"]
    with psycopg.connect(dsn, autocommit=True) as owner:
        owner.execute("UPDATE scrinalia.archive_worker_schedules SET next_run_at = now() - interval '1 second'")
        owner.execute("NOTIFY scrinalia_scheduler")
        for w in workers:
            b.wait_event("enqueued", worker=w)
        assert owner.execute("SELECT count(*) FROM scrinalia.archive_worker_runs").fetchone()[0] == 3
    ticks = [e for e in a.events[a_resumed:] if e.get("event") in ("pass", "enqueued", "skipped", "armed")]
    assert ticks == [], ticks
    # its lock session ends when idle holder_idle_limit(), counted from A's last
    # statement on it (the keepalive's, at most KEEPALIVE_EVERY before the freeze)
    with psycopg.connect(dsn, autocommit=True) as owner:
        idle = owner.execute("SELECT extract(epoch FROM scrinalia.holder_idle_limit())::float8").fetchone()[0]
    assert idle - KEEPALIVE_EVERY - 0.1 <= took < idle + 2.0, took
    print(
        f"\nRELIABILITY least-privilege install: frozen holder replaced in {took:.2f} s"
        f" (the lock session idle-limited to {idle:.1f} s)"
    )
