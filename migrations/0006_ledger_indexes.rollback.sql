-- The indexes of 0005 again: the history of every run per worker, the periods by
-- worker, retry_of's UNIQUE constraint over every run.
ALTER TABLE scrinalia.archive_worker_runs
    ADD CONSTRAINT archive_worker_runs_retry_of_key UNIQUE (retry_of);
DROP INDEX scrinalia.uq_worker_run_retry_of;

ALTER INDEX scrinalia.uq_worker_run_period RENAME TO uq_worker_run_period_by_period;
CREATE UNIQUE INDEX uq_worker_run_period
    ON scrinalia.archive_worker_runs (worker_name, scheduled_for)
    WHERE attempt = 1 AND scheduled_for IS NOT NULL;
DROP INDEX scrinalia.uq_worker_run_period_by_period;

CREATE INDEX ix_worker_runs_history
    ON scrinalia.archive_worker_runs (worker_name, run_id DESC);
DROP INDEX scrinalia.ix_worker_runs_finished;
