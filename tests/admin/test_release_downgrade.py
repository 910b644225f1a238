"""Downgrading to an earlier release and back, with that release's own code: this
release rolls back to its head, its migrate completes and its scheduler ticks, then
this release migrates forward again; the history is intact throughout and this
release's scheduler, left running, exits 2 with the advice. Run for the previous
release (0.5.0: its migrate installs its own code over ours, and ours comes back) and
the ones before (0.4.0, 0.3.0, 0.2.0; 0.1.0, whose yoyo tables live in the public
schema). Every scheduler runs under the scheduler group's login, as a
least-privilege deploy runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from helpers import claim, cli, finish, make_worker
from scrinalia_workers import __version__
from scrinalia_workers.admin import migrate as m
from scrinalia_workers.admin.bookkeeping import BOOKKEEPING_SCHEMA
from scrinalia_workers.testkit.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
# (commit, its version, its schema head, whether its yoyo tables are in public)
RELEASES = {
    "0.9.8": ("bf94443", "0017_schedule_configs", False),
    "0.9.7": ("dea9c23", "0016_period_lateness", False),
    "0.9.6": ("7cc525a", "0016_period_lateness", False),
    "0.9.5": ("55d4294", "0016_period_lateness", False),
    "0.9.4": ("25a2fa6", "0016_period_lateness", False),
    "0.9.3": ("85919cc", "0016_period_lateness", False),
    "0.9.2": ("4a93f00", "0016_period_lateness", False),
    "0.9.1": ("18fb726", "0016_period_lateness", False),
    "0.9.0": ("268aaa6", "0016_period_lateness", False),
    "0.8.2": ("b187134", "0015_run_catch_up_column", False),
    "0.8.1": ("0d4d70e", "0015_run_catch_up_column", False),
    "0.8.0": ("99690a3", "0015_run_catch_up_column", False),
    "0.7.0": ("06a5d98", "0015_run_catch_up_column", False),
    "0.6.0": ("9c5564c", "0014_runner_stalls", False),
    "0.5.0": ("39d19b9", "0013_alerts_retention", False),
    "0.4.0": ("14ef89b", "0009_metrics_tallies", False),
    "0.3.0": ("97f3a12", "0008_metrics_indexes", False),
    "0.2.0": ("cb01a6d", "0006_ledger_indexes", False),
    "0.1.0": ("5ba9e6d", "0004_roles", True),
}
DB_VARS = ("DATABASE_URL", "PGHOST", "PGPORT", "PGDATABASE", "PGUSER", "PGPASSWORD", "PGSERVICE")

pytestmark = pytest.mark.slow


@pytest.fixture(params=sorted(RELEASES, reverse=True))
def release(request) -> str:
    return request.param


@pytest.fixture
def previous(tmp_path, release) -> Path:
    """The earlier release's tree (its py_shim, sql/ and migrations/), from git."""
    commit = RELEASES[release][0]
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit], capture_output=True)
    if archive.returncode != 0:
        pytest.fail(
            f"release {release} (commit {commit}) is not in this clone's history, and this test runs its "
            f"code: fetch the full history (git fetch --unshallow): {archive.stderr.decode(errors='replace')}"
        )
    subprocess.run(["tar", "-x", "-C", str(tmp_path)], input=archive.stdout, check=True)
    return tmp_path


def _env(previous: Path, dsn: str) -> dict[str, str]:
    """The previous release's code run by this venv's python, as its README installed it."""
    env = {k: v for k, v in os.environ.items() if k not in DB_VARS}
    return {**env, "PYTHONPATH": str(previous / "py_shim"), "SCRINALIA_ROOT": str(previous), "DATABASE_URL": dsn}


def _history(dsn: str) -> list[tuple]:
    with psycopg.connect(dsn, autocommit=True) as c:
        return c.execute(
            "SELECT run_id, worker_name, status::text, trigger::text, attempt, scheduled_for, finished_at"
            " FROM scrinalia.archive_worker_runs ORDER BY run_id"
        ).fetchall()


def _schedules(dsn: str) -> list[tuple]:
    with psycopg.connect(dsn, autocommit=True) as c:
        return c.execute(
            "SELECT worker_name, cron, timezone, enabled FROM scrinalia.archive_worker_schedules ORDER BY 1"
        ).fetchall()


def test_roll_back_to_an_earlier_release_run_it_and_come_back(db_dsn, release, previous, procs, role_logins):
    _commit, PREVIOUS_HEAD, yoyo_in_public = RELEASES[release]
    as_scheduler = psycopg.conninfo.make_conninfo(db_dsn, user=role_logins["scheduler"])
    heads = m.head_ids()
    newer = heads[heads.index(PREVIOUS_HEAD) + 1 :]
    with psycopg.connect(db_dsn, autocommit=True) as c:
        make_worker(c, "ocr")
        make_worker(c, "thumbs")
        c.execute("SELECT scrinalia.put_schedule('ocr', '0 2 * * *', 'UTC')")
        c.execute("SELECT scrinalia.put_schedule('thumbs', '* * * * *', 'UTC')")
        c.execute("SELECT scrinalia.enqueue('ocr')")
        run = claim(c, workers=["ocr"])
        finish(c, run[0], run[1])
        c.execute("SELECT scrinalia.enqueue('ocr')")  # one left QUEUED
    history, schedules = _history(db_dsn), _schedules(db_dsn)
    assert len(history) == 2

    ours = procs.scheduler(as_scheduler, "--standby-retry", "0.2")
    ours.wait_event("lock acquired", timeout=30)

    if newer:
        r = cli("migrate", "--rollback", "--count", str(len(newer)), dsn=db_dsn)
        assert r.code == 0, r.err
        assert r.out.split() == [w for mid in reversed(newer) for w in ("rolled", "back", mid)]
        # this release's scheduler, left running, leaves with the advice instead of looping
        assert ours.wait(30) == 2
        assert "no scrinalia code installed" in ours.tail(), ours.tail()
    else:  # the same head: nothing to roll back, the older code replaces ours in place
        assert ours.stop() == 0
    # (a minute boundary may have let it enqueue a period of thumbs meanwhile)
    assert _history(db_dsn)[:2] == history and _schedules(db_dsn) == schedules
    history = _history(db_dsn)

    # the previous release's own migrate completes, and its scheduler runs
    old = subprocess.run(
        [sys.executable, "-m", "scrinalia_workers", "migrate"],
        env=_env(previous, db_dsn),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert old.returncode == 0, old.stderr
    assert f"already at the head ({PREVIOUS_HEAD})" in old.stdout, old.stdout
    with psycopg.connect(db_dsn, autocommit=True) as c:
        assert c.execute("SELECT scrinalia.schema_head()").fetchone()[0] == PREVIOUS_HEAD
        assert (c.execute("SELECT to_regclass('public._yoyo_migration')").fetchone()[0] is not None) == yoyo_in_public
        t0 = c.execute(
            "UPDATE scrinalia.archive_worker_schedules SET next_run_at = now() - interval '1 minute'"
            " WHERE worker_name = 'thumbs' RETURNING now()"
        ).fetchone()[0]
    assert _history(db_dsn) == history
    old_scheduler = procs.start(
        [sys.executable, "-m", "scrinalia_workers.scheduler", "--json", "--max-sleep", "0.5"],
        env=_env(previous, as_scheduler),
    )

    def ticked_by_the_old_release():  # enqueued, or skipped if a period of ours is still queued
        with psycopg.connect(db_dsn, autocommit=True) as c:
            return c.execute(
                "SELECT greatest(last_enqueued_at, last_skipped_at) > %s FROM scrinalia.archive_worker_schedules"
                " WHERE worker_name = 'thumbs'",
                (t0,),
            ).fetchone()[0]

    wait_for(
        ticked_by_the_old_release, timeout=60, what="the previous release's scheduler to tick", watch=[old_scheduler]
    )
    assert old_scheduler.stop() == 0
    assert [e for e in old_scheduler.events if e.get("level") == "error"] == [], old_scheduler.tail()
    assert _history(db_dsn)[: len(history)] == history
    history = _history(db_dsn)

    # and forward again with this release
    assert m.migrate(db_dsn) == newer
    with psycopg.connect(db_dsn, autocommit=True) as c:
        assert c.execute("SELECT scrinalia.schema_head()").fetchone()[0] == m.head_ids()[-1]
        assert c.execute("SELECT scrinalia.installed_release()").fetchone()[0] == __version__
        assert c.execute("SELECT to_regclass('public._yoyo_migration')").fetchone()[0] is None
        assert c.execute(f"SELECT count(*) FROM {BOOKKEEPING_SCHEMA}._yoyo_migration").fetchone()[0] == len(heads)
    assert _history(db_dsn) == history and _schedules(db_dsn) == schedules
    assert cli("status", dsn=db_dsn).code == 0
    ours = procs.scheduler(as_scheduler)
    ours.wait_event("lock acquired", timeout=30)
