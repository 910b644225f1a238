"""scrinalia_workers.testing on a database of the user's own: migrated, a handlers module
by name, the clock of a schedule moved, and its misuse answered."""

from __future__ import annotations

import pytest

from scrinalia_workers.admin.migrate import head_ids
from scrinalia_workers.testing import TestDatabase


def test_a_database_of_your_own_is_migrated_and_runs_your_module(empty_db_dsn):
    with TestDatabase(empty_db_dsn) as db:
        assert db.conn.execute("SELECT scrinalia.schema_head() AS h").fetchone()["h"] == head_ids()[-1]
        db.register("boom")
        run_id = db.enqueue("boom")
        row = db.run_one("demo_handlers")  # tests/demo_handlers.py, by its module name
        assert row["run_id"] == run_id and row["status"] == "FAILED" and not row["retry_pending"]
        assert "boom on attempt 1" in row["error"] and db.run(run_id)["status"] == "FAILED"
        assert db.run_one("demo_handlers") is None
        assert '"event"' in db.log.getvalue()


def test_make_due_brings_the_next_firing_to_now(empty_db_dsn):
    with TestDatabase(empty_db_dsn) as db:
        db.register("ok")
        db.schedule("ok", "0 0 1 1 *")
        db.tick()
        assert db.tick() is False  # armed for next January: nothing due
        db.make_due("ok")
        assert db.tick() is True
        row = db.run_one({"ok": lambda run: None})
        assert row["status"] == "SUCCEEDED" and row["trigger"] == "SCHEDULE"


def test_outside_its_with_block_it_says_how_to_use_it():
    with pytest.raises(RuntimeError, match="context manager"):
        TestDatabase("host=nowhere").enqueue("ocr")
