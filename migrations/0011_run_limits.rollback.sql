-- What reads the new table and column goes first: the trigger keeping the skips in a
-- row, the views that show the limit and worker_metrics() (its columns grew: the
-- previous release's migrate could not replace it). The previous release's migrate
-- re-installs its own code.
DROP TRIGGER IF EXISTS schedule_enqueued ON scrinalia.archive_worker_schedules;
DROP VIEW IF EXISTS scrinalia.worker_agenda;
DROP VIEW IF EXISTS scrinalia.worker_catalogue;
DROP FUNCTION IF EXISTS scrinalia.worker_metrics();
DROP INDEX scrinalia.ix_worker_schedules_skipping;
ALTER TABLE scrinalia.archive_worker_schedules DROP COLUMN skipped_count_at_enqueue;
DROP INDEX scrinalia.ix_worker_runs_timed_out;
DROP INDEX scrinalia.ix_worker_runs_running_started;
DROP TABLE scrinalia.archive_worker_limits;
