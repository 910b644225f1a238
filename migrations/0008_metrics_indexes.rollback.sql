-- The ledger's indexes of 0006 again: the previous release reads the retries and the
-- latest failures without them.
DROP INDEX scrinalia.ix_worker_runs_failures;
DROP INDEX scrinalia.ix_worker_runs_retries;
