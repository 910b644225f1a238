-- The foreign key from a retry to the run it retries refuses the delete of a run that
-- a retry still points to, as before, but as ON DELETE RESTRICT rather than the default
-- NO ACTION. The only difference PostgreSQL makes between them on a delete: NO ACTION
-- first asks, for every deleted row, whether another row now holds its key (one probe
-- of the primary key a row), and RESTRICT does not. No run's key is ever given to
-- another row (run_id comes from a sequence and is never updated), so the answer was
-- always no, and the prune paid that probe on every run it deleted. Both are checked at
-- the end of the statement, so a retry chain still goes in one DELETE. Updates keep NO
-- ACTION. Nothing an earlier release's daemons read or write changes. (PostgreSQL 18
-- reports a refused delete as restrict_violation, 23001, where NO ACTION said 23503.)
-- Two transactions (yoyo commits each statement of this file on its own): the swap,
-- one ALTER TABLE holding the ledger for a moment; then the validation, which reads the
-- whole ledger under a lock that lets runs be written meanwhile. Run again after a
-- failed validation, the swap finds the constraint to drop by its name and starts over.
-- depends: 0017_schedule_configs
-- transactional: false

ALTER TABLE scrinalia.archive_worker_runs
    DROP CONSTRAINT archive_worker_runs_retry_of_fkey,
    ADD CONSTRAINT archive_worker_runs_retry_of_fkey FOREIGN KEY (retry_of)
        REFERENCES scrinalia.archive_worker_runs (run_id) ON DELETE RESTRICT NOT VALID;

ALTER TABLE scrinalia.archive_worker_runs VALIDATE CONSTRAINT archive_worker_runs_retry_of_fkey;
