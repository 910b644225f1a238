"""0008_metrics_indexes: the per-worker retry index worker_metrics() counts through and
the failures index `status --watch` reads its latest failures from, rolled back and
applied again, the answers the same on either side."""

from __future__ import annotations

import psycopg

from helpers import two_attempt_period
from scrinalia_workers.admin import migrate as m
from scrinalia_workers.gateway.statements import cli as cli_sql

INDEX = (
    "SELECT to_regclass('scrinalia.ix_worker_runs_retries') IS NOT NULL "
    "AND to_regclass('scrinalia.ix_worker_runs_failures') IS NOT NULL"
)
GONE = (
    "SELECT to_regclass('scrinalia.ix_worker_runs_retries') IS NULL "
    "AND to_regclass('scrinalia.ix_worker_runs_failures') IS NULL"
)
RETRIES = "SELECT worker_name, retries_created FROM scrinalia.worker_metrics() ORDER BY 1"


def _ledger(c) -> None:
    two_attempt_period(c, "SUCCEEDED")


def test_the_retry_index_is_made_and_rolled_back(empty_db_dsn):
    m.migrate(empty_db_dsn)
    with psycopg.connect(empty_db_dsn, autocommit=True) as c:
        assert c.execute(INDEX).fetchone()[0]
        assert c.execute("SELECT scrinalia.schema_head()").fetchone()[0] == m.head_ids()[-1]
        _ledger(c)
        # the count is read through the index, not through every retry's row
        c.execute("SET enable_seqscan = off")
        c.execute("SET enable_bitmapscan = off")
        plan = "\n".join(
            r[0]
            for r in c.execute(
                "EXPLAIN SELECT count(*) FROM scrinalia.archive_worker_runs r "
                "WHERE r.worker_name = 'ocr' AND r.retry_of IS NOT NULL"
            )
        )
        assert "ix_worker_runs_retries" in plan
        failures = cli_sql.LATEST_FAILURES % 5
        plan = "\n".join(r[0] for r in c.execute("EXPLAIN " + failures))
        assert "ix_worker_runs_failures" in plan and "Sort" not in plan
        before = c.execute(RETRIES).fetchall()
        assert [(r[1], r[2]) for r in c.execute(failures)] == [("ocr", "FAILED")]
    assert before == [("idle", 0), ("ocr", 1)]
    assert m.rollback(empty_db_dsn, count=3) == ["0010_rerun", "0009_metrics_tallies", "0008_metrics_indexes"]
    with psycopg.connect(empty_db_dsn, autocommit=True) as c:
        assert c.execute(GONE).fetchone()[0]
    assert m.migrate(empty_db_dsn) == ["0008_metrics_indexes", "0009_metrics_tallies", "0010_rerun"]
    with psycopg.connect(empty_db_dsn, autocommit=True) as c:
        assert c.execute(INDEX).fetchone()[0]
        assert c.execute(RETRIES).fetchall() == before
