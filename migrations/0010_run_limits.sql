-- Nothing stops unseen: every run's maximum run time, and what the workers' alerts
-- read without scanning the history.
-- * archive_workers.max_run_time: the worker's own limit (NULL: the policy's default,
--   default_max_run_time() in sql/05_policy.sql); set by the owner (set_max_run_time).
-- * archive_worker_runs.deadline_at: when a RUNNING run is ended (INTERRUPTED) by the
--   scheduler's pass; set by the claim, indexed over the RUNNING runs only.
-- * archive_worker_schedules.skipped_count_at_enqueue: skipped_count when the schedule
--   last enqueued a period (a trigger keeps it): the difference is how many periods in
--   a row were skipped; an index holds only the schedules skipping now.
-- Each CREATE INDEX blocks writes to its table while it runs.
-- depends: 0009_metrics_tallies

-- The strongest locks first (see 0006): a daemon that read a table in its open
-- transaction and then writes to it must not deadlock with an upgrade.
LOCK TABLE scrinalia.archive_worker_runs, scrinalia.archive_workers, scrinalia.archive_worker_schedules
    IN ACCESS EXCLUSIVE MODE;

ALTER TABLE scrinalia.archive_workers
    ADD COLUMN max_run_time interval CHECK (max_run_time > interval '0');

ALTER TABLE scrinalia.archive_worker_runs
    ADD COLUMN deadline_at timestamptz;

-- the reaper's scan of the runs past their deadline (NULL: a run no claim started,
-- written by hand, whose worker's limit the reaper applies)
CREATE INDEX ix_worker_runs_deadline
    ON scrinalia.archive_worker_runs (deadline_at)
    WHERE status = 'RUNNING';

-- the runs interrupted at their maximum run time, recently: the RUN_TIMED_OUT alerts
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
