"""The code in sql/ is replaced in place (issue 13): same OIDs, obsolete objects and
stale grants gone, and a change that cannot be made in place refused whole."""

from __future__ import annotations

import shutil

import psycopg
import pytest

from scrinalia_workers import sqlfiles as paths
from scrinalia_workers.admin import migrate as m


def _oids(conn) -> dict[str, int]:
    return dict(
        conn.execute(
            "SELECT p.oid::regprocedure::text, p.oid::int FROM pg_proc p "
            "JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'scrinalia'"
        ).fetchall()
    )


def test_functions_keep_their_oids_and_obsolete_code_goes(db_dsn, db):
    before = _oids(db)
    db.execute("CREATE FUNCTION scrinalia.old_helper(int) RETURNS int LANGUAGE sql AS 'SELECT 1'")
    db.execute("CREATE PROCEDURE scrinalia.old_proc() LANGUAGE sql AS 'SELECT 1'")
    db.execute("CREATE VIEW scrinalia.old_view AS SELECT 1 AS one")
    assert m.migrate(db_dsn) == []
    assert _oids(db) == before
    assert db.execute("SELECT to_regclass('scrinalia.old_view')").fetchone()[0] is None


def test_a_stale_grant_is_taken_back(db_dsn, db):
    tick = "scrinalia.tick(text[], timestamptz[], text)"
    db.execute(f"GRANT EXECUTE ON FUNCTION {tick} TO scrinalia_reader")
    db.execute("GRANT SELECT ON scrinalia.archive_worker_runs TO scrinalia_runner")
    m.migrate(db_dsn)
    assert (
        db.execute("SELECT has_function_privilege('scrinalia_reader', %s, 'EXECUTE')", (tick,)).fetchone()[0] is False
    )
    assert (
        db.execute(
            "SELECT has_table_privilege('scrinalia_runner', 'scrinalia.archive_worker_runs', 'SELECT')"
        ).fetchone()[0]
        is False
    )
    # what sql/ grants is still granted (85_retention's grant comes before 90's)
    assert (
        db.execute(
            "SELECT has_function_privilege('scrinalia_operator', 'scrinalia.prune_runs(interval, integer)', 'EXECUTE')"
        ).fetchone()[0]
        is True
    )


@pytest.fixture
def release(tmp_path, monkeypatch):
    """A copy of this release's sql/ and migrations/, as the next release to edit."""
    root = tmp_path / "release"
    for d in ("sql", "migrations"):
        shutil.copytree(paths.project_root() / d, root / d)
    monkeypatch.setenv("SCRINALIA_ROOT", str(root))
    return root


def test_a_change_that_cannot_be_made_in_place_is_refused_whole(db_dsn, db, release):
    (release / "sql" / "75_next.sql").write_text(
        "CREATE OR REPLACE FUNCTION scrinalia.schema_head() RETURNS integer LANGUAGE sql AS 'SELECT 5';\n"
    )
    db.execute("CREATE FUNCTION scrinalia.old_helper() RETURNS int LANGUAGE sql AS 'SELECT 1'")
    before = _oids(db)
    with pytest.raises(m.ConfigError) as e:
        m.migrate(db_dsn)
    assert "75_next.sql" in str(e.value) and "new name" in str(e.value)
    assert _oids(db) == before  # nothing dropped, nothing replaced


def test_a_function_renamed_by_the_next_release_is_replaced_by_its_new_name(db_dsn, db, release):
    status = release / "sql" / "70_status.sql"
    status.write_text(status.read_text().replace("scrinalia.scheduler_status()", "scrinalia.scheduler_status_v2()"))
    roles = release / "sql" / "90_roles.sql"
    roles.write_text(roles.read_text().replace("scrinalia.scheduler_status()", "scrinalia.scheduler_status_v2()"))
    m.migrate(db_dsn)
    names = _oids(db)
    assert "scrinalia.scheduler_status_v2()" in names and "scrinalia.scheduler_status()" not in names


def test_current_code_depending_on_an_obsolete_function_fails_migrate_whole(db_dsn, db, release):
    db.execute("CREATE FUNCTION scrinalia.legacy() RETURNS int LANGUAGE sql AS 'SELECT 1'")
    (release / "sql" / "81_uses_legacy.sql").write_text(
        "CREATE VIEW scrinalia.uses_legacy AS SELECT scrinalia.legacy() AS x;\n"
    )
    with pytest.raises(psycopg.errors.DependentObjectsStillExist):
        m.migrate(db_dsn)
    assert "scrinalia.legacy()" in _oids(db)
    assert db.execute("SELECT to_regclass('scrinalia.uses_legacy')").fetchone()[0] is None
