-- The two indexes every new run was inserted into at a random place, which a ledger
-- of a million finished runs makes deep and cold (issue 12: the tick ~15% slower
-- with that history than without):
-- * the per-worker history holds the finished runs only: a QUEUED or RUNNING run is
--   its worker's one slot (uq_worker_run_active), so neither the tick's INSERT nor a
--   claim writes to it any more, only the finish;
-- * the period index leads with the period, so that a new period lands at its right
--   edge; it enforces the same uniqueness;
-- * one retry per run (retry_of UNIQUE) is a partial unique index over the retries:
--   every other run's NULL was an entry too, written again by each claim and finish.
-- Each is built before the one it replaces is dropped. CREATE INDEX blocks writes to
-- the ledger while it runs: about a second per million runs.
-- depends: 0005_health

-- The strongest lock the migration needs, first: taken later (DROP INDEX after CREATE
-- INDEX's SHARE lock) it is an upgrade, and a daemon that read the ledger in its open
-- transaction and then writes to it deadlocks with it.
LOCK TABLE scrinalia.archive_worker_runs IN ACCESS EXCLUSIVE MODE;

CREATE INDEX ix_worker_runs_finished
    ON scrinalia.archive_worker_runs (worker_name, run_id DESC)
    WHERE status NOT IN ('QUEUED', 'RUNNING');
DROP INDEX scrinalia.ix_worker_runs_history;

ALTER INDEX scrinalia.uq_worker_run_period RENAME TO uq_worker_run_period_by_worker;
CREATE UNIQUE INDEX uq_worker_run_period
    ON scrinalia.archive_worker_runs (scheduled_for, worker_name)
    WHERE attempt = 1 AND scheduled_for IS NOT NULL;
DROP INDEX scrinalia.uq_worker_run_period_by_worker;

CREATE UNIQUE INDEX uq_worker_run_retry_of
    ON scrinalia.archive_worker_runs (retry_of)
    WHERE retry_of IS NOT NULL;
ALTER TABLE scrinalia.archive_worker_runs DROP CONSTRAINT archive_worker_runs_retry_of_key;
