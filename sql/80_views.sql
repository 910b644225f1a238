-- The panel's views: the agenda and the run history, with the queue counters apart.

CREATE OR REPLACE VIEW scrinalia.worker_agenda AS
SELECT w.worker_name,
       s.worker_name IS NOT NULL AS scheduled,
       s.cron, s.timezone,
       CASE WHEN s.enabled THEN s.next_run_at END AS next_run_at,
       NOT s.enabled AS paused,
       s.enabled AND s.next_run_at IS NULL AS awaiting_arm,
       s.last_enqueued_at, s.last_run_id, s.last_skipped_at, s.last_skip_reason,
       a.run_id AS active_run_id, a.status AS active_status, a.trigger AS active_trigger,
       a.attempt AS active_attempt, a.not_before AS active_not_before,
       s.request, s.updated_by, s.updated_at,
       -- set aside: the scheduler cannot compute this schedule (see scheduler_health())
       s.arm_error, s.arm_error_since, s.arm_retry_at,
       -- the slot held by an owed retry (ADR 0015: from the failure on, whether or not a
       -- scheduler runs; enqueue answers SW010): the failed attempt, the attempt the
       -- retry will be, and since when. (Appended: a view grows only at its end.)
       o.run_id AS owed_by_run_id, o.status AS owed_by_status, o.attempt + 1 AS owed_attempt,
       o.finished_at AS owed_since,
       -- every run's limit (0011_run_limits): the worker's maximum run time, when its
       -- RUNNING run started and when the scheduler ends it, and how many of the
       -- schedule's periods in a row were skipped (starved_alert_periods() is an alert)
       coalesce(wl.max_run_time, scrinalia.default_max_run_time()) AS max_run_time,
       CASE WHEN a.status = 'RUNNING' THEN a.started_at END AS active_started_at,
       CASE WHEN a.status = 'RUNNING'
            THEN a.started_at + coalesce(wl.max_run_time, scrinalia.default_max_run_time()) END AS active_deadline_at,
       CASE WHEN s.enabled THEN s.skipped_count - s.skipped_count_at_enqueue END AS skipped_in_a_row
  FROM scrinalia.archive_workers w
  LEFT JOIN scrinalia.archive_worker_schedules s ON s.worker_name = w.worker_name
  LEFT JOIN scrinalia.archive_worker_limits wl ON wl.worker_name = w.worker_name
  LEFT JOIN scrinalia.archive_worker_runs a
         ON a.worker_name = w.worker_name AND a.status IN ('QUEUED', 'RUNNING')
  LEFT JOIN LATERAL (
        SELECT p.run_id, p.status, p.attempt, p.finished_at FROM scrinalia.archive_worker_runs p
         WHERE p.worker_name = w.worker_name AND p.retry_pending
         ORDER BY p.run_id LIMIT 1) o ON true;

CREATE OR REPLACE VIEW scrinalia.worker_run_history AS
SELECT r.run_id, r.worker_name, r.status, r.trigger, r.attempt,
       CASE WHEN r.trigger = 'SCHEDULE' THEN format('%s/%s', r.attempt, scrinalia.max_attempts())
            ELSE '1/1' END AS attempt_label,
       r.retry_of,
       (SELECT n.run_id FROM scrinalia.archive_worker_runs n WHERE n.retry_of = r.run_id) AS retried_by,
       r.not_before, r.scheduled_for, r.created_at, r.started_at, r.finished_at, r.duration,
       r.error, r.error_fingerprint, r.requested_by, r.lease_owner, r.lease_expires_at,
       r.request, r.config, r.config_sources,
       -- whether the tick found periods missed when it created this attempt 1 (one run
       -- for them all: the run's catch_up); NULL for a manual run or a retry, false for
       -- one an earlier release's tick made. (Appended: a view grows only at its end.)
       CASE WHEN r.trigger = 'SCHEDULE' AND r.attempt = 1 THEN r.catch_up END AS catch_up,
       -- a run's re-runs by hand (rerun()), oldest first ('{}' when none), and the run a
       -- re-run re-runs. (Appended too.)
       ARRAY(SELECT n.run_id FROM scrinalia.archive_run_reruns n
              WHERE n.rerun_of = r.run_id ORDER BY n.run_id) AS rerun_by,
       l.rerun_of
  FROM scrinalia.archive_worker_runs r
  LEFT JOIN scrinalia.archive_run_reruns l ON l.run_id = r.run_id;

CREATE OR REPLACE VIEW scrinalia.worker_queue_counters AS
SELECT w.worker_name,
       count(u.unit_id) FILTER (WHERE u.processed_at IS NULL) AS pending,
       count(u.unit_id) FILTER (WHERE u.processed_at IS NOT NULL) AS processed
  FROM scrinalia.archive_workers w
  LEFT JOIN scrinalia.archive_worker_units u ON u.worker_name = w.worker_name
 GROUP BY w.worker_name;

-- The worker catalogue as `scrinalia-workers worker list|show` prints it: what a panel
-- or an operator needs to know which workers, engines, presets and options exist.
-- Written only by the owner (register_worker at deploy time, set_max_run_time); read by
-- every group.
CREATE OR REPLACE VIEW scrinalia.worker_catalogue AS
SELECT w.worker_name, w.description, w.engines, w.presets, w.options, w.default_config,
       w.created_at, w.updated_at,
       -- (appended) the limit in force, and whether it is the policy's default
       coalesce(wl.max_run_time, scrinalia.default_max_run_time()) AS max_run_time,
       wl.max_run_time IS NULL AS max_run_time_is_default
  FROM scrinalia.archive_workers w
  LEFT JOIN scrinalia.archive_worker_limits wl ON wl.worker_name = w.worker_name;
