-- Which SCHEDULE attempts 1 the tick created after periods were missed (one run for
-- them all: the catch-up): the tick decides it, the scheduler's log, worker_runs() and
-- the timeline show it, and SQL can ask for it (worker_run_history.catch_up). A table
-- of its own, one row per catch-up, rather than a column of the ledger: claim_next and
-- the other functions return the ledger's row type, and a column more changes their
-- result type under an earlier release's daemon whose statement was prepared against
-- the old one ("cached plan must not change result type"). No foreign key: one would
-- refuse a TRUNCATE of the ledger; the ledger's triggers (sql/50_tick.sql) delete a
-- row with its run.
-- And the attempt bound left to the policy: max_attempts() (sql/05_policy.sql) is
-- its one home. The CHECKs of 0003 restated it as 3, so a raised policy failed on the
-- fourth attempt: an attempt is now only at least 1, and the bound is enforced where a
-- retry is owed (owes_retry() sets retry_pending, from which alone retries are created).
-- The new CHECKs are added NOT VALID then validated: the validation reads the ledger
-- without blocking its writers.
-- depends: 0009_metrics_tallies

CREATE TABLE scrinalia.archive_run_catch_ups (
    run_id bigint PRIMARY KEY
);

ALTER TABLE scrinalia.archive_worker_runs
    DROP CONSTRAINT archive_worker_runs_attempt_check,
    DROP CONSTRAINT ck_worker_runs_retry_pending_terminal,
    ADD CONSTRAINT ck_worker_runs_attempt CHECK (attempt >= 1) NOT VALID,
    ADD CONSTRAINT ck_worker_runs_retry_pending_terminal
        CHECK (NOT retry_pending OR status IN ('FAILED', 'INTERRUPTED')) NOT VALID;

ALTER TABLE scrinalia.archive_worker_runs VALIDATE CONSTRAINT ck_worker_runs_attempt;
ALTER TABLE scrinalia.archive_worker_runs VALIDATE CONSTRAINT ck_worker_runs_retry_pending_terminal;
