-- The views read these columns: drop them first; the previous release's migrate
-- re-installs its own code.
DROP VIEW IF EXISTS scrinalia.worker_agenda;
ALTER TABLE scrinalia.scheduler_state
    DROP COLUMN heartbeat_by,
    DROP COLUMN heartbeat_work_pid,
    DROP COLUMN heartbeat_pid,
    DROP COLUMN heartbeat_at;
DROP INDEX scrinalia.ix_worker_runs_reaped;
DROP INDEX scrinalia.ix_worker_schedules_set_aside;
ALTER TABLE scrinalia.archive_worker_schedules
    DROP COLUMN skipped_count,
    DROP COLUMN arm_retry_at,
    DROP COLUMN arm_error_since,
    DROP COLUMN arm_error;
