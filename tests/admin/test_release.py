"""Which release a database runs: --version, the installed release recorded by migrate
and shown by status, an older release refusing a newer database, and a rollback that
leaves no code behind written for a head the database is no longer at."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import psycopg
import pytest

from helpers import assert_one_line_error, cli, make_worker, migrations_from, rollback_to, table_fingerprints
from scrinalia_workers import __version__
from scrinalia_workers.admin import migrate as m
from scrinalia_workers.admin.bookkeeping import BOOKKEEPING_SCHEMA
from scrinalia_workers.errors import SchemaMismatch

ROOT = Path(__file__).resolve().parents[2]
FUTURE = "0099_from_a_newer_release"


def test_the_version_has_one_home_and_every_command_answers_it():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert __version__ == declared == metadata.version("scrinalia-workers")
    assert f"## {declared}" in (ROOT / "CHANGELOG.md").read_text()
    for module, prog in (
        ("scrinalia_workers", "scrinalia-workers"),
        ("scrinalia_workers.scheduler", "scrinalia-scheduler"),
        ("scrinalia_workers.runner", "scrinalia-runner"),
    ):
        p = subprocess.run([sys.executable, "-m", module, "--version"], capture_output=True, text=True, timeout=60)
        assert (p.returncode, p.stdout.strip()) == (0, f"{prog} {__version__}"), (p.stdout, p.stderr)


def test_the_image_installs_the_package_and_keeps_no_source_tree():
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "SCRINALIA_ROOT" not in dockerfile
    copied = " ".join(re.findall(r"^COPY (.+)$", dockerfile, re.M))
    assert "setup.py" in copied and "MANIFEST.in" in copied  # the build step that takes the SQL in
    assert "rm -rf /src" in dockerfile  # the installed package alone is read


def test_migrate_records_the_release_and_status_shows_it(db_dsn, connect_as):
    with psycopg.connect(db_dsn, autocommit=True) as c:
        assert c.execute("SELECT scrinalia.installed_release()").fetchone()[0] == __version__
    # every group may read it (status runs as a reader)
    assert connect_as("reader").execute("SELECT scrinalia.installed_release()").fetchone()[0] == __version__
    r = cli("status", dsn=db_dsn)
    assert r.code == 0, r.err
    assert (
        r.out.splitlines()[0]
        == f"release: code installed by scrinalia-workers {__version__} (schema {m.head_ids()[-1]})"
    )


def _as_a_newer_release(dsn: str) -> None:
    """What a newer release's migrate leaves: a migration and code this one lacks."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(
            f"INSERT INTO {BOOKKEEPING_SCHEMA}._yoyo_migration (migration_hash, migration_id, applied_at_utc)"
            " VALUES (%s, %s, now())",
            ("f" * 64, FUTURE),
        )
        c.execute("CREATE FUNCTION scrinalia.from_the_future() RETURNS int LANGUAGE sql AS 'SELECT 1'")
        c.execute(
            f"CREATE OR REPLACE FUNCTION scrinalia.schema_head() RETURNS text LANGUAGE sql AS $$ SELECT '{FUTURE}'::text $$"
        )


def test_an_older_release_refuses_to_migrate_a_newer_database_and_changes_nothing(db_dsn):
    _as_a_newer_release(db_dsn)
    with psycopg.connect(db_dsn, autocommit=True) as c:
        before = table_fingerprints(c)
    with pytest.raises(SchemaMismatch) as e:
        m.migrate(db_dsn)
    assert FUTURE in str(e.value) and "older than the database" in str(e.value)
    r = cli("migrate", dsn=db_dsn)
    assert_one_line_error(r, 1, FUTURE, "older than the database", "nothing was changed")
    assert "already at the head" not in r.out
    with psycopg.connect(db_dsn, autocommit=True) as c:
        assert table_fingerprints(c) == before
        assert c.execute("SELECT scrinalia.from_the_future()").fetchone()[0] == 1
        assert c.execute("SELECT scrinalia.schema_head()").fetchone()[0] == FUTURE
    with pytest.raises(SchemaMismatch):
        m.rollback(db_dsn, count=1)


def test_daemons_facing_a_newer_schema_say_this_release_is_older(db_dsn, procs):
    _as_a_newer_release(db_dsn)
    for p in (procs.scheduler(db_dsn), procs.runner(db_dsn)):
        assert p.wait(30) == 2
        text = p.tail()
        assert "older than the database" in text and FUTURE in text, text
        assert "run `scrinalia-workers migrate`" not in text, text


def test_a_rollback_takes_the_code_written_for_the_head_and_migrate_brings_it_back(db_dsn, procs):
    with psycopg.connect(db_dsn, autocommit=True) as c:
        make_worker(c, "ocr")
        c.execute("SELECT scrinalia.put_schedule('ocr', '0 2 * * *', 'UTC')")
        run_id = c.execute("SELECT run_id FROM scrinalia.enqueue('ocr')").fetchone()[0]
    assert rollback_to(db_dsn, "0005_health") == migrations_from("0005_health")[::-1]
    with psycopg.connect(db_dsn, autocommit=True) as c:
        # no function nor view is left that needs what went, nor one that says the old head
        assert c.execute("SELECT to_regprocedure('scrinalia.schema_head()')").fetchone()[0] is None
        assert c.execute("SELECT to_regclass('scrinalia.worker_agenda')").fetchone()[0] is None
        left = c.execute(
            "SELECT array_agg(p.proname::text) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE n.nspname = 'scrinalia'"
        ).fetchone()[0]
        assert left == ["scheduler_lock_key"]
        # yoyo's tables are where the previous release's yoyo looks for them
        assert c.execute("SELECT to_regclass('public._yoyo_migration')").fetchone()[0] is not None
        assert c.execute("SELECT to_regnamespace(%s)", (BOOKKEEPING_SCHEMA,)).fetchone()[0] is None
    r = cli("status", dsn=db_dsn)
    assert_one_line_error(r, 1, "no scrinalia code installed", "migrate")
    sched = procs.scheduler(db_dsn)
    assert sched.wait(30) == 2
    assert "no scrinalia code installed" in sched.tail()
    assert m.migrate(db_dsn) == migrations_from("0005_health")
    with psycopg.connect(db_dsn, autocommit=True) as c:
        assert c.execute("SELECT scrinalia.schema_head()").fetchone()[0] == m.head_ids()[-1]
        assert (
            c.execute("SELECT status::text FROM scrinalia.archive_worker_runs WHERE run_id = %s", (run_id,)).fetchone()[
                0
            ]
            == "QUEUED"
        )
        assert (
            c.execute("SELECT cron FROM scrinalia.worker_agenda WHERE worker_name = 'ocr'").fetchone()[0] == "0 2 * * *"
        )
    assert cli("status", dsn=db_dsn).code == 0


def test_a_rollback_below_the_bookkeeping_refuses_a_table_already_in_its_way(db_dsn):
    with psycopg.connect(db_dsn, autocommit=True) as c:
        c.execute("CREATE TABLE public._yoyo_migration (planted int)")
    with pytest.raises(m.ConfigError) as e:
        m.rollback(db_dsn, count=len(migrations_from("0005_health")))
    assert "_yoyo_migration already exists" in str(e.value) and "nothing was rolled back" in str(e.value)
    assert m.applied_migrations(db_dsn) == m.head_ids()
    with psycopg.connect(db_dsn, autocommit=True) as c:
        assert c.execute("SELECT scrinalia.schema_head()").fetchone()[0] == m.head_ids()[-1]
    # one migration back stays above it: the record stays where it is
    assert m.rollback(db_dsn, count=1) == [m.head_ids()[-1]]
    with psycopg.connect(db_dsn, autocommit=True) as c:
        assert c.execute("SELECT to_regclass(%s)", (f"{BOOKKEEPING_SCHEMA}._yoyo_migration",)).fetchone()[0]


def test_a_daemon_call_failing_after_a_rollback_is_told_why(db_dsn):
    """gateway.checks.schema_moved: what the daemons' loops call on an undefined object."""
    from scrinalia_workers.gateway.checks import schema_moved

    assert rollback_to(db_dsn, "0005_health") == migrations_from("0005_health")[::-1]
    with psycopg.connect(db_dsn, autocommit=True) as c:
        with pytest.raises(psycopg.errors.UndefinedFunction) as e:
            c.execute("SELECT * FROM scrinalia.claim_runs('r1', interval '1 minute', NULL, 1)")
        moved = schema_moved(c, e.value)
        assert isinstance(moved, SchemaMismatch) and "no scrinalia code installed" in str(moved)
        assert schema_moved(c, psycopg.errors.DivisionByZero()) is None
