-- One worker's runs, as `scrinalia-workers runs WORKER [--timeline]` shows them: rows of
-- the worker_run_history view, read through the ledger's indexes rather than by
-- filtering the whole history. The status literals repeat the indexes' predicates
-- (uq_worker_run_active, ix_worker_runs_finished) so that the planner can use them.

-- The worker's QUEUED/RUNNING run (its one slot) and its newest finished runs, newest
-- first, at most p_limit.
CREATE OR REPLACE FUNCTION scrinalia.worker_runs(p_worker_name text, p_limit integer DEFAULT 20)
RETURNS SETOF scrinalia.worker_run_history
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
SELECT * FROM scrinalia.worker_run_history
 WHERE worker_name = p_worker_name AND status IN ('QUEUED', 'RUNNING')
UNION ALL
(SELECT * FROM scrinalia.worker_run_history
  WHERE worker_name = p_worker_name AND status NOT IN ('QUEUED', 'RUNNING')
  ORDER BY run_id DESC LIMIT p_limit)
ORDER BY run_id DESC LIMIT p_limit
$$;

-- The worker's last p_periods scheduled periods, newest first, each with its attempts in
-- order. A period's attempts are consecutive among the worker's SCHEDULE runs (the tick
-- skips while a retry is owed), so its live run and its newest p_periods x
-- max_attempts() finished ones hold them all.
CREATE OR REPLACE FUNCTION scrinalia.worker_timeline(p_worker_name text, p_periods integer DEFAULT 10)
RETURNS SETOF scrinalia.worker_run_history
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
WITH recent AS (
    SELECT * FROM scrinalia.worker_run_history
     WHERE worker_name = p_worker_name AND trigger = 'SCHEDULE' AND status IN ('QUEUED', 'RUNNING')
    UNION ALL
    (SELECT * FROM scrinalia.worker_run_history
      WHERE worker_name = p_worker_name AND trigger = 'SCHEDULE' AND status NOT IN ('QUEUED', 'RUNNING')
      ORDER BY run_id DESC LIMIT p_periods * scrinalia.max_attempts())
)
SELECT * FROM recent
 WHERE scheduled_for IN (SELECT DISTINCT scheduled_for FROM recent ORDER BY scheduled_for DESC LIMIT p_periods)
 ORDER BY scheduled_for DESC, attempt
$$;
