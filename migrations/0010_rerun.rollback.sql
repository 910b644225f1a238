-- The history view shows the column (sql/80_views.sql): it goes first, with the code
-- reading it (the rollback drops the rest of this release's code after it anyway).
DROP VIEW IF EXISTS scrinalia.worker_run_history CASCADE;
DROP INDEX scrinalia.ix_worker_runs_rerun_of;
ALTER TABLE scrinalia.archive_worker_runs DROP COLUMN rerun_of;
