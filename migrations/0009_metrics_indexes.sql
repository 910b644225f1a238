-- The retries of each worker, for worker_metrics()'s retries_created counter: without
-- it, every scrape read every retry's row of the whole ledger to learn its worker.
-- Partial: an attempt 1 (retry_of NULL), most of the ledger, is never written to it;
-- a retry adds an entry for each row version its insert, claim and finish write (those
-- updates change status, which other indexes hold: they were not HOT before either).
-- CREATE INDEX blocks writes to the ledger while it runs: well under a second per
-- million runs.
-- depends: 0006_ledger_indexes

CREATE INDEX ix_worker_runs_retries
    ON scrinalia.archive_worker_runs (worker_name)
    WHERE retry_of IS NOT NULL;
