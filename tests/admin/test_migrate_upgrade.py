"""An upgrade from the previous release (the first landing, 0004_roles) to this one, in
place, with its data: what an operator's `migrate` does on deploy day."""

from __future__ import annotations

import subprocess
from pathlib import Path

import psycopg
import pytest

from scrinalia_workers.admin.migrate import migrate

ROOT = Path(__file__).resolve().parents[2]
PREVIOUS = "5ba9e6d"  # the first landing: schema head 0004_roles


@pytest.fixture
def previous_release(tmp_path) -> Path:
    """migrations/ and sql/ of the previous release, as its package would install them."""
    try:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", PREVIOUS, "migrations", "sql"], capture_output=True, check=True
        ).stdout
    except (subprocess.CalledProcessError, FileNotFoundError) as e:
        pytest.skip(f"the previous release is not in this checkout's history: {e}")
    subprocess.run(["tar", "-x", "-C", str(tmp_path)], input=archive, check=True)
    return tmp_path


def test_upgrade_in_place_keeps_the_data_and_reaches_the_head(empty_db_dsn, previous_release, monkeypatch):
    monkeypatch.setenv("SCRINALIA_ROOT", str(previous_release))
    migrate(empty_db_dsn, create_groups=True)
    with psycopg.connect(empty_db_dsn, autocommit=True) as c:
        assert c.execute("SELECT scrinalia.schema_head()").fetchone()[0] == "0004_roles"
        c.execute("SELECT scrinalia.register_worker('ocr')")
        c.execute("SELECT scrinalia.put_schedule('ocr', '0 2 * * *', 'UTC')")
        run_id = c.execute("SELECT run_id FROM scrinalia.enqueue('ocr')").fetchone()[0]
        old_cols = c.execute("SELECT count(*) FROM scrinalia.scheduler_status()").fetchone()[0]
        assert old_cols == 1
    monkeypatch.delenv("SCRINALIA_ROOT")
    applied = migrate(empty_db_dsn)
    assert applied == [
        "0005_health",
        "0006_ledger_indexes",
        "0007_cron_masks",
        "0008_metrics_indexes",
        "0009_metrics_tallies",
        "0010_rerun",
    ]
    with psycopg.connect(empty_db_dsn, autocommit=True) as c:
        assert c.execute("SELECT scrinalia.schema_head()").fetchone()[0] == "0010_rerun"
        st = c.execute("SELECT holder_role, heartbeat_at FROM scrinalia.scheduler_status()").fetchone()
        assert st == (None, None)
        assert (
            c.execute("SELECT status::text FROM scrinalia.archive_worker_runs WHERE run_id = %s", (run_id,)).fetchone()[
                0
            ]
            == "QUEUED"
        )
        assert c.execute(
            "SELECT cron, arm_error FROM scrinalia.worker_agenda WHERE worker_name = 'ocr'"
        ).fetchone() == ("0 2 * * *", None)
        # nothing of the previous release's code is left behind
        assert c.execute("SELECT to_regprocedure('scrinalia.describe_active_run(text)')").fetchone()[0] is None
        assert c.execute("SELECT to_regprocedure('scrinalia.no_schedule(text)')").fetchone()[0] is None
    assert migrate(empty_db_dsn) == []  # and again: idempotent


def test_every_function_and_view_is_replaced_in_place():
    """migrate re-installs sql/ while clients run (issue 13): a bare CREATE would fail on
    an existing function, and a DROP would make callers see it missing."""
    import re

    for f in sorted((ROOT / "sql").glob("*.sql")):
        text = f.read_text()
        bare = re.findall(r"^CREATE (?!OR REPLACE)(FUNCTION|VIEW|PROCEDURE)\b.*$", text, re.M)
        assert not bare, f"sql/{f.name}: {bare}"
        drops = [
            d for d in re.findall(r"^\s*DROP (?:FUNCTION|VIEW)\s+[^;]*", text, re.M) if "scheduler_status()" not in d
        ]  # the one documented return-type change
        assert not drops or f.name == "99_drop_obsolete.sql", f"sql/{f.name}: {drops}"
