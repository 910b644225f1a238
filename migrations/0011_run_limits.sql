-- Nothing stops unseen: every run's maximum run time, and what the workers' alerts
-- read without scanning the history. No column is added to the ledger or the
-- catalogue: a function an earlier release's daemon calls returns their rows, and
-- between this migration and the code replaced after it a wider row would not match
-- what that daemon's prepared statement expects.
-- * archive_worker_limits: a worker's own maximum run time (no row: the policy's
--   default_max_run_time() in sql/05_policy.sql); set by the owner (set_max_run_time).
-- * ix_worker_runs_running_started: the RUNNING runs by their start, what the reaper
--   reads to end those past their limit (started_at + the limit).
-- * ix_worker_runs_timed_out: the runs ended at their limit recently (RUN_TIMED_OUT).
-- * archive_worker_schedules.skipped_count_at_enqueue: skipped_count when the schedule
--   last enqueued a period (a trigger keeps it): the difference is how many periods in
--   a row were skipped; an index holds only the schedules skipping now.
-- Each CREATE INDEX blocks writes to its table while it runs.
-- depends: 0010_run_catch_up

-- The strongest locks first (see 0006): a daemon that read a table in its open
-- transaction and then writes to it must not deadlock with an upgrade.
LOCK TABLE scrinalia.archive_worker_runs, scrinalia.archive_worker_schedules IN ACCESS EXCLUSIVE MODE;

CREATE TABLE scrinalia.archive_worker_limits (
    worker_name   text PRIMARY KEY REFERENCES scrinalia.archive_workers ON DELETE CASCADE,
    max_run_time  interval NOT NULL CHECK (max_run_time > interval '0'),
    updated_at    timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX ix_worker_runs_running_started
    ON scrinalia.archive_worker_runs (started_at)
    WHERE status = 'RUNNING';

CREATE INDEX ix_worker_runs_timed_out
    ON scrinalia.archive_worker_runs (finished_at)
    WHERE error_fingerprint = 'max-run-time';

ALTER TABLE scrinalia.archive_worker_schedules
    ADD COLUMN skipped_count_at_enqueue bigint NOT NULL DEFAULT 0;
-- (no skip in a row is known of before this migration)
UPDATE scrinalia.archive_worker_schedules SET skipped_count_at_enqueue = skipped_count
 WHERE skipped_count <> 0;

CREATE INDEX ix_worker_schedules_skipping
    ON scrinalia.archive_worker_schedules ((skipped_count - skipped_count_at_enqueue))
    WHERE enabled AND skipped_count > skipped_count_at_enqueue;
