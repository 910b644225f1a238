"""A deploy while the runner runs: the SQL code re-installed whole (and a migration
adding a column to the runs table) must not make the runner see an error."""

from __future__ import annotations

import pytest

from helpers import make_worker, run_row
from scrinalia_workers.admin.migrate import apply_code

pytestmark = pytest.mark.slow


def test_code_reinstalled_under_a_running_runner(db, db_dsn, procs):
    make_worker(db, "ok")
    p = procs.runner(db_dsn, "demo_handlers")
    p.wait_event("runner started")
    for _ in range(8):  # past psycopg's prepare threshold (5): the claim would be a cached plan
        run_id = db.execute("SELECT run_id FROM scrinalia.enqueue('ok')").fetchone()[0]
        p.wait_event("finished", run_id=run_id)
    # a release as migrate() does it: the migration commits, then the code is replaced
    db.execute("ALTER TABLE scrinalia.archive_worker_runs ADD COLUMN deploy_test integer")
    apply_code(db)
    for _ in range(3):
        run_id = db.execute("SELECT run_id FROM scrinalia.enqueue('ok')").fetchone()[0]
        p.wait_event("finished", run_id=run_id, status="SUCCEEDED")
    assert p.stop() == 0
    # a cached plan of the claim would fail on every call after the release ("cached plan
    # must not change result type") until a reconnect: none is kept. And the claim returns
    # worker_run_v1, not the ledger's row: a column more changes nothing of its result,
    # not even for a claim between the migration's commit and the code's.
    errors = [e["reason"] for e in p.events if e.get("event") == "database error"]
    assert errors == [] and p.count("runner error") == 0, "".join(p.raw[-10:])
    assert run_row(db, run_id)["status"] == "SUCCEEDED"
