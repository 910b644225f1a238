-- The masks are derived from the stored crons: nothing is lost. The index of 0003 again.
LOCK TABLE scrinalia.archive_worker_schedules IN ACCESS EXCLUSIVE MODE;
CREATE INDEX ix_worker_schedules_due
    ON scrinalia.archive_worker_schedules (next_run_at)
    WHERE enabled;
DROP INDEX scrinalia.ix_worker_schedules_due_order;
DROP TABLE scrinalia.archive_cron_masks;
