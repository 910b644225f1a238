-- The view that shows the column first, with the functions of its row type: the
-- previous release's migrate cannot replace a view whose columns it would drop (it
-- re-creates its own). The tick functions that return catch_up are new names
-- (tick_v2, tick_due_at_v2): that migrate drops them as code it does not define.
DROP FUNCTION IF EXISTS scrinalia.worker_runs(text, integer);
DROP FUNCTION IF EXISTS scrinalia.worker_timeline(text, integer);
DROP VIEW IF EXISTS scrinalia.worker_run_history;
DROP TRIGGER IF EXISTS run_catch_ups_delete ON scrinalia.archive_worker_runs;
DROP TRIGGER IF EXISTS run_catch_ups_truncate ON scrinalia.archive_worker_runs;
-- (from 0.6.0 one pair of triggers serves both side tables: sql/37_run_side_rows.sql)
DROP TRIGGER IF EXISTS run_side_rows_delete ON scrinalia.archive_worker_runs;
DROP TRIGGER IF EXISTS run_side_rows_truncate ON scrinalia.archive_worker_runs;
DROP TABLE scrinalia.archive_run_catch_ups;
-- 0003's CHECKs again: fails while a run has an attempt above 3 (the previous release
-- cannot hold it).
ALTER TABLE scrinalia.archive_worker_runs
    DROP CONSTRAINT ck_worker_runs_retry_pending_terminal,
    DROP CONSTRAINT ck_worker_runs_attempt,
    ADD CONSTRAINT archive_worker_runs_attempt_check CHECK (attempt BETWEEN 1 AND 3),
    ADD CONSTRAINT ck_worker_runs_retry_pending_terminal
        CHECK (NOT retry_pending OR (status IN ('FAILED', 'INTERRUPTED') AND attempt < 3));
