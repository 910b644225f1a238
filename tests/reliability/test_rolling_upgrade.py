"""A rolling upgrade from each earlier release, for real: that release's own code (git
archive PREVIOUS) migrates a database and runs two schedulers and two runners under
load, and this release's migrate changes the code they call. Then a release whose
migration adds a column to archive_worker_runs (the row type the claim returns) under
this release's daemons. Every daemon runs under its own group's login (a scheduler
login that is only a member of scrinalia_scheduler, a runner login only of
scrinalia_runner), as a least-privilege deploy runs them: the superuser would pass
every caller check. The daemons log no error (and never a loop of them), none exits,
and every period is enqueued exactly once.

(0.1.0's runner prepares its claim on the server: a change of the claim's row type
would kill it with "cached plan must not change result type". The functions that
return a run return the frozen worker_run_v1 since 0015, which switches them in the
same transaction as it adds the ledger's column; this release's runner prepares
nothing.)

Each of PERIODS schedules is armed on its own second (yearly cron: one period each in
the test), so periods come due before, during and after the migrate; every
FAIL_EVERY-th handler raises, so retries are owed across the upgrade as well.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from psycopg.rows import dict_row

from helpers import code_digest
from invariants import check_all, owed_retries, settled_after
from scrinalia_workers.admin import migrate as m
from scrinalia_workers.testkit.waiting import wait_for

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
# the previous release (0.5.0) and the ones before (0.4.0, 0.3.0, 0.2.0, 0.1.0): each
# release's daemons must live through the next one's migrate, and a deploy may skip a release
# (its commit: its schema head)
PREVIOUS = {
    "bf94443": "0017_schedule_configs",
    "dea9c23": "0016_period_lateness",
    "7cc525a": "0016_period_lateness",
    "55d4294": "0016_period_lateness",
    "25a2fa6": "0016_period_lateness",
    "85919cc": "0016_period_lateness",
    "4a93f00": "0016_period_lateness",
    "18fb726": "0016_period_lateness",
    "268aaa6": "0016_period_lateness",
    "b187134": "0015_run_catch_up_column",
    "0d4d70e": "0015_run_catch_up_column",
    "99690a3": "0015_run_catch_up_column",
    "06a5d98": "0015_run_catch_up_column",
    "9c5564c": "0014_runner_stalls",
    "39d19b9": "0013_alerts_retention",
    "14ef89b": "0009_metrics_tallies",
    "97f3a12": "0008_metrics_indexes",
    "cb01a6d": "0006_ledger_indexes",
    "5ba9e6d": "0004_roles",
}
PERIODS = 24
FIRST_AT = 3
FAIL_EVERY = 6
ERROR_LINES_AT_MOST = 3
# what the previous release's daemons log when something went wrong
TROUBLE = {
    "tick error",
    "pass error",
    "lock lost",
    "database unavailable",
    "database error",
    "runner error",
    "heartbeat error",
    "report abandoned",
    "lease lost",
    "config error",
}

HANDLERS = textwrap.dedent(f"""
    import time

    def work(run):
        time.sleep(0.2)
        if int(run["worker_name"][1:]) % {FAIL_EVERY} == 0:
            raise RuntimeError("this worker always fails")

    HANDLERS = {{f"p{{g:02d}}": work for g in range(1, {PERIODS} + 1)}}
""")

EXTRA_COLUMN = "ALTER TABLE scrinalia.archive_worker_runs ADD COLUMN upgrade_note text;\n"


@pytest.fixture(scope="module", params=sorted(PREVIOUS))
def previous(request, tmp_path_factory) -> Path:
    """An earlier release's tree, as `git archive` gives it."""
    commit = request.param
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and this checkout's history")
    where = tmp_path_factory.mktemp("previous", numbered=True) / commit
    where.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit], capture_output=True, check=False)
    if archive.returncode != 0:
        pytest.skip(f"release {commit} is not in this checkout's history")
    subprocess.run(["tar", "-x", "-C", str(where)], input=archive.stdout, check=True)
    return where


def _env(root: Path, handlers_dir: Path) -> dict[str, str]:
    return {"PYTHONPATH": f"{root / 'py_shim'}{os.pathsep}{handlers_dir}", "SCRINALIA_ROOT": str(root)}


def _a_release_with_a_new_column(tmp_path: Path) -> Path:
    """This release's SQL, plus a migration that adds a column to archive_worker_runs."""
    root = tmp_path / "next-release"
    shutil.copytree(ROOT / "sql", root / "sql")
    shutil.copytree(ROOT / "migrations", root / "migrations")
    head = sorted(p.name for p in (root / "migrations").glob("[0-9]*.sql") if ".rollback." not in p.name)[-1]
    number = int(head.split("_")[0]) + 1
    (root / "migrations" / f"{number:04d}_upgrade_note.sql").write_text(
        f"-- depends: {head.removesuffix('.sql')}\n" + EXTRA_COLUMN
    )
    (root / "migrations" / f"{number:04d}_upgrade_note.rollback.sql").write_text(
        "ALTER TABLE scrinalia.archive_worker_runs DROP COLUMN upgrade_note;\n"
    )
    return root


def _seed(db) -> tuple:
    workers = [f"p{g:02d}" for g in range(1, PERIODS + 1)]
    db.execute("INSERT INTO scrinalia.archive_workers (worker_name) SELECT unnest(%s::text[])", (workers,))
    first = db.execute("SELECT date_trunc('second', now()) + %s * interval '1 second'", (FIRST_AT,)).fetchone()[0]
    db.execute(
        "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone, next_run_at)"
        " SELECT w, '0 0 1 1 *', 'UTC', %s + (g - 1) * interval '1 second'"
        "   FROM unnest(%s::text[]) WITH ORDINALITY AS u(w, g)",
        (first, workers),
    )
    return first, first + timedelta(seconds=PERIODS - 1)


def _succeeded(db) -> int:
    return db.execute("SELECT count(*) FROM scrinalia.archive_worker_runs WHERE status = 'SUCCEEDED'").fetchone()[0]


def _daemons(procs, dsn: str, env: dict[str, str], logins: dict[str, str]) -> list:
    def daemon(module: str, *args: str):
        as_login = psycopg.conninfo.make_conninfo(dsn, user=logins[module])
        argv = [sys.executable, "-m", f"scrinalia_workers.{module}", "--dsn", as_login, "--json", *args]
        return procs.start(argv, env=env)

    scheds = [daemon("scheduler", "--standby-retry", "0.5", "--max-sleep", "0.3", "--name", f"s{i}") for i in (1, 2)]
    runners = [
        daemon("runner", "--handlers", "upgrade_handlers", "--lease", "5", "--runner-id", f"r{i}") for i in (1, 2)
    ]
    return scheds + runners


def _no_error_loop(daemons: list) -> None:
    """A daemon refused on every pass shows as a flood of error lines: fail at once."""
    errors = [sum(1 for e in p.events if e.get("level") == "error") for p in daemons]
    assert max(errors) <= ERROR_LINES_AT_MOST, f"error lines {errors}: " + " | ".join(p.tail(2) for p in daemons)


def _settle_and_check(db, procs, daemons: list, first, last, changed_at) -> None:
    """Every period run once, the owed retries made by the daemons alone, no error logged."""

    def settled() -> bool:
        _no_error_loop(daemons)
        return settled_after(db, last)

    try:
        wait_for(
            settled,
            timeout=PERIODS + FIRST_AT + 30,
            interval=0.2,
            what="every period ticked and run",
        )
    except AssertionError as e:
        raise AssertionError(f"{e}: " + " | ".join(p.tail(8) for p in daemons)) from None
    # the scheduler alone creates the retries owed (a pass every --max-sleep)
    settled_at = db.execute("SELECT now()").fetchone()[0]
    wait_for(lambda: owed_retries(db, settled_at) == [], timeout=10, what="the owed retries created")
    # the standbys first: a standby of 0.2.0 that took the lock over a newer schema would
    # exit 2 saying so (its start-up rule, docs/operate.md "Rolling deploys")
    holds = [any(e.get("event") == "lock acquired" for e in p.events) for p in daemons]
    codes = procs.stop_all([p for p, h in zip(daemons, holds) if not h], timeout=30)
    codes += procs.stop_all([p for p, h in zip(daemons, holds) if h], timeout=30)
    _no_error_loop(daemons)
    trouble = [
        (e.get("event"), e.get("reason"))
        for p in daemons
        for e in p.events
        if e.get("event") in TROUBLE or e.get("level") == "error"
    ]
    assert trouble == [], trouble
    assert codes == [0] * len(codes), [p.tail(5) for p in daemons]
    assert not any("Traceback" in line for p in daemons for line in p.raw)
    runs = db.cursor(row_factory=dict_row).execute("SELECT * FROM scrinalia.archive_worker_runs").fetchall()
    firsts: dict[tuple, list[dict]] = {}
    for run in runs:
        if run["trigger"] == "SCHEDULE" and run["attempt"] == 1:
            firsts.setdefault((run["worker_name"], run["scheduled_for"]), []).append(run)
    expected = {(f"p{g:02d}", first + timedelta(seconds=g - 1)) for g in range(1, PERIODS + 1)}
    assert set(firsts) == expected, sorted(set(firsts) ^ expected)  # none lost
    assert all(len(v) == 1 for v in firsts.values())  # none twice
    for (worker, _), (run,) in firsts.items():
        wanted = "FAILED" if int(worker[1:]) % FAIL_EVERY == 0 else "SUCCEEDED"
        assert run["status"] == wanted, run
    # the daemons went on claiming and reporting after the change
    assert any(run["created_at"] > changed_at and run["status"] == "SUCCEEDED" for run in runs)
    assert check_all(db, settled_at=settled_at) == []


def _migrate_cli(dsn: str, env: dict[str, str]) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "scrinalia_workers", "migrate", "--dsn", dsn],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr


@pytest.fixture
def handlers_env(tmp_path) -> Path:
    where = tmp_path / "handlers"
    where.mkdir()
    (where / "upgrade_handlers.py").write_text(HANDLERS)
    return where


def _same_sql(previous: Path) -> bool:
    def text(root: Path) -> dict[str, str]:
        return {p.name: p.read_text() for p in sorted((root / "sql").glob("*.sql"))}

    return text(previous) == text(ROOT)


def test_the_previous_releases_daemons_through_this_releases_migrate(
    previous, empty_db_dsn, procs, handlers_env, role_logins
):
    dsn = empty_db_dsn
    old = _env(previous, handlers_env)
    _migrate_cli(dsn, old)  # the previous release's own migrate
    with psycopg.connect(dsn, autocommit=True) as db:
        before = code_digest(db)
        first, last = _seed(db)
        daemons = _daemons(procs, dsn, old, role_logins)
        wait_for(lambda: _succeeded(db) >= 4, timeout=FIRST_AT + 20, what="the old daemons running periods")
        # this release's migrate, in place, under the previous release's daemons
        heads = m.head_ids()
        assert m.migrate(dsn) == heads[heads.index(PREVIOUS[previous.name]) + 1 :]
        if not _same_sql(previous):
            assert code_digest(db) != before, "the migrate must change the code the old daemons call"
        changed_at = db.execute("SELECT now()").fetchone()[0]
        _settle_and_check(db, procs, daemons, first, last, changed_at)


def test_a_migration_changing_the_claims_row_type_under_this_releases_daemons(
    db, db_dsn, procs, handlers_env, tmp_path, role_logins
):
    """The next release adds a column to archive_worker_runs: claim_next and claim_runs
    return another row type. This release's daemons prepare no statement on the server
    (gateway.connection), so nothing of theirs holds a plan of the old type."""
    env = {"PYTHONPATH": os.pathsep.join([str(handlers_env), os.environ.get("PYTHONPATH", "")])}
    first, last = _seed(db)
    daemons = _daemons(procs, db_dsn, env, role_logins)
    wait_for(lambda: _succeeded(db) >= 4, timeout=FIRST_AT + 20, what="the daemons running periods")
    _migrate_cli(db_dsn, {"SCRINALIA_ROOT": str(_a_release_with_a_new_column(tmp_path))})
    assert db.execute(
        "SELECT count(*) FROM information_schema.columns"
        " WHERE table_schema = 'scrinalia' AND table_name = 'archive_worker_runs' AND column_name = 'upgrade_note'"
    ).fetchone() == (1,)
    changed_at = db.execute("SELECT now()").fetchone()[0]
    _settle_and_check(db, procs, daemons, first, last, changed_at)
