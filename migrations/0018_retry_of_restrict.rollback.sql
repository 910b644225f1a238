-- The foreign key back to NO ACTION, as the release below defines it; nothing is lost.
-- One statement, paired by yoyo with the migration's first (the swap): the validation
-- needs no undoing. It reads the ledger holding it (the daemons are stopped for a
-- downgrade, docs/operate.md), and runs alone when the migration's validation failed.
-- transactional: false

ALTER TABLE scrinalia.archive_worker_runs
    DROP CONSTRAINT archive_worker_runs_retry_of_fkey,
    ADD CONSTRAINT archive_worker_runs_retry_of_fkey FOREIGN KEY (retry_of)
        REFERENCES scrinalia.archive_worker_runs (run_id);
