-- The retries of each worker, for worker_metrics()'s retries_created counter: without
-- it, every scrape read every retry's row of the whole ledger to learn its worker.
-- Partial: an attempt 1 (retry_of NULL), most of the ledger, is never written to it;
-- a retry adds an entry for each row version its insert, claim and finish write (those
-- updates change status, which other indexes hold: they were not HOT before either).
-- The latest failures, newest first, which `status --watch` shows every refresh: without
-- it, a sort of every FAILED and INTERRUPTED run of the history. Only a run that ends
-- FAILED or INTERRUPTED is written to it.
-- Each CREATE INDEX blocks writes to the ledger while it runs: about a second per
-- million runs.
-- depends: 0007_cron_masks

CREATE INDEX ix_worker_runs_retries
    ON scrinalia.archive_worker_runs (worker_name)
    WHERE retry_of IS NOT NULL;

CREATE INDEX ix_worker_runs_failures
    ON scrinalia.archive_worker_runs (finished_at DESC NULLS LAST, run_id DESC)
    WHERE status IN ('FAILED', 'INTERRUPTED');
