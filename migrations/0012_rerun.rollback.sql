-- The triggers first: a run deleted meanwhile must not meet a trigger whose table is
-- gone. The history view reads the table (sql/80_views.sql): it goes next, with the
-- code returning its rows (the rollback drops the rest of this release's code after it).
DROP TRIGGER IF EXISTS run_reruns_delete ON scrinalia.archive_worker_runs;
DROP TRIGGER IF EXISTS run_reruns_truncate ON scrinalia.archive_worker_runs;
-- (from 0.6.0 one pair of triggers serves both side tables: sql/37_run_side_rows.sql)
DROP TRIGGER IF EXISTS run_side_rows_delete ON scrinalia.archive_worker_runs;
DROP TRIGGER IF EXISTS run_side_rows_truncate ON scrinalia.archive_worker_runs;
DROP VIEW IF EXISTS scrinalia.worker_run_history CASCADE;
DROP TABLE scrinalia.archive_run_reruns;
