-- Whether the tick found periods missed when it created a SCHEDULE attempt 1 (one
-- run for them all: the catch-up), kept on the run: the tick decides it, the
-- scheduler's log, worker_runs() and the timeline show it, and SQL can ask for it.
-- NULL: not recorded (a manual run, a retry, a run written before this release or
-- by an earlier release's tick during a rolling upgrade, whose INSERT leaves it out).
-- No default and nullable: adding it rewrites nothing.
-- And the attempt bound left to the policy: max_attempts() (sql/05_policy.sql) is
-- its one home. The CHECKs of 0003 restated it as 3, so a raised policy failed on the
-- fourth attempt: an attempt is now only at least 1, and the bound is enforced where a
-- retry is owed (owes_retry() sets retry_pending, from which alone retries are created).
-- The new CHECKs are added NOT VALID then validated: the validation reads the ledger
-- without blocking its writers.
-- depends: 0009_metrics_tallies

ALTER TABLE scrinalia.archive_worker_runs
    ADD COLUMN catch_up boolean,
    DROP CONSTRAINT archive_worker_runs_attempt_check,
    DROP CONSTRAINT ck_worker_runs_retry_pending_terminal,
    ADD CONSTRAINT ck_worker_runs_attempt CHECK (attempt >= 1) NOT VALID,
    ADD CONSTRAINT ck_worker_runs_retry_pending_terminal
        CHECK (NOT retry_pending OR status IN ('FAILED', 'INTERRUPTED')) NOT VALID;

ALTER TABLE scrinalia.archive_worker_runs VALIDATE CONSTRAINT ck_worker_runs_attempt;
ALTER TABLE scrinalia.archive_worker_runs VALIDATE CONSTRAINT ck_worker_runs_retry_pending_terminal;
