"""A deploy while the runner runs: the SQL code re-installed whole (and a migration
adding a column to the runs table) must not make the runner see an error."""

from __future__ import annotations

import pytest

from helpers import make_worker, run_row
from procs import start_runner
from scrinalia_workers.migrate import apply_code

pytestmark = pytest.mark.slow


def test_code_reinstalled_under_a_running_runner(db, db_dsn):
    make_worker(db, "ok")
    p = start_runner(db_dsn, "demo_handlers")
    try:
        p.wait_event("runner started")
        for _ in range(8):  # past psycopg's prepare threshold (5): the claim would be a cached plan
            run_id = db.execute("SELECT run_id FROM scrinalia.enqueue('ok')").fetchone()[0]
            p.wait_event("finished", run_id=run_id)
        # what a release does: a migration changes the table, then the code is replaced whole
        db.execute("ALTER TABLE scrinalia.archive_worker_runs ADD COLUMN deploy_test integer")
        apply_code(db)
        for _ in range(3):
            run_id = db.execute("SELECT run_id FROM scrinalia.enqueue('ok')").fetchone()[0]
            p.wait_event("finished", run_id=run_id, status="SUCCEEDED")
        assert p.stop() == 0
    finally:
        if p.popen.poll() is None:
            p.kill()
    assert p.count("database error") == 0 and p.count("runner error") == 0, "".join(p.raw[-10:])
    assert run_row(db, run_id)["status"] == "SUCCEEDED"
