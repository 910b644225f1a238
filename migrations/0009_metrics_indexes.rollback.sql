-- The ledger's indexes of 0006 again: the previous release's worker_metrics() counts
-- the retries without it.
DROP INDEX scrinalia.ix_worker_runs_retries;
