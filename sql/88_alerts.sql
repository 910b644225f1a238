-- What an operator's stack reads: the current alerts in words, and the metrics that
-- prometheus-postgres-exporter exposes (monitoring/queries.yaml). All for the reader
-- group; labels are worker names, statuses and triggers, never run ids.
-- Each sets jit = off: the planner costs their per-worker index probes far above what
-- they do, so with a large ledger every call was JIT-compiled first, and compiling
-- took many times longer than the query. The two the exporter reads per worker are
-- PL/pgSQL: its session plans them once, where an SQL function's body is planned at
-- every call.

-- The latest finished scheduled period of each worker that has one, with every
-- attempt's run id (a period is finished when no attempt of it is QUEUED/RUNNING and
-- no retry is owed). Latest by run id: the tick creates a worker's periods in their
-- order. A few index probes per schedule, no walk of the history: its newest finished
-- attempt 1 (ix_worker_runs_finished), then that attempt's retry and the retry's retry
-- (uq_worker_run_retry_of), the whole chain when attempts rise 1, 2, 3 as the tick makes
-- them. Only a worker whose newest period is still open (a retry owed or under way), or
-- whose chain was written by hand otherwise, walks its history below that attempt.
CREATE OR REPLACE FUNCTION scrinalia.latest_finished_periods()
RETURNS TABLE (worker_name text, scheduled_for timestamptz, run_ids bigint[], attempts integer,
               last_status scrinalia.run_status, last_error text, finished_at timestamptz)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, scrinalia, pg_temp
SET jit = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH periods AS (
        SELECT s.worker_name, h.run_id, h.scheduled_for,
               array_remove(ARRAY[h.run_id, r2.run_id, r3.run_id], NULL) AS run_ids,
               coalesce(r3.attempt, r2.attempt, h.attempt) AS attempts,
               CASE WHEN r3.run_id IS NOT NULL THEN r3.status WHEN r2.run_id IS NOT NULL THEN r2.status
                    ELSE h.status END AS last_status,
               CASE WHEN r3.run_id IS NOT NULL THEN r3.error WHEN r2.run_id IS NOT NULL THEN r2.error
                    ELSE h.error END AS last_error,
               CASE WHEN r3.run_id IS NOT NULL THEN r3.finished_at WHEN r2.run_id IS NOT NULL THEN r2.finished_at
                    ELSE h.finished_at END AS finished_at,
               (h.retry_pending OR coalesce(r2.retry_pending OR r2.status IN ('QUEUED', 'RUNNING'), false)
                OR coalesce(r3.retry_pending OR r3.status IN ('QUEUED', 'RUNNING'), false)) AS open,
               -- (attempts rising along the chain, which ends at r3: else the walk below decides)
               (r3.run_id IS NULL OR (r3.attempt > r2.attempt AND r4.run_id IS NULL)) AS plain
          FROM scrinalia.archive_worker_schedules s
         CROSS JOIN LATERAL (
            SELECT a1.run_id, a1.scheduled_for, a1.attempt, a1.status, a1.error, a1.finished_at, a1.retry_pending
              FROM scrinalia.archive_worker_runs a1
             WHERE a1.worker_name = s.worker_name AND a1.attempt = 1 AND a1.scheduled_for IS NOT NULL
               AND a1.status NOT IN ('QUEUED', 'RUNNING')
             ORDER BY a1.run_id DESC
             LIMIT 1
         ) h
          -- (OFFSET 0 keeps each a probe of the retry index: merged, a join reads every retry)
          LEFT JOIN LATERAL (
            SELECT r.run_id, r.attempt, r.status, r.error, r.finished_at, r.retry_pending
              FROM scrinalia.archive_worker_runs r WHERE r.retry_of = h.run_id OFFSET 0) r2 ON true
          LEFT JOIN LATERAL (
            SELECT r.run_id, r.attempt, r.status, r.error, r.finished_at, r.retry_pending
              FROM scrinalia.archive_worker_runs r WHERE r.retry_of = r2.run_id OFFSET 0) r3 ON true
          LEFT JOIN LATERAL (
            SELECT r.run_id FROM scrinalia.archive_worker_runs r WHERE r.retry_of = r3.run_id OFFSET 0) r4 ON true
    )
    SELECT p.worker_name, p.scheduled_for, p.run_ids, p.attempts, p.last_status, p.last_error, p.finished_at
      FROM periods p
     WHERE p.plain AND NOT p.open
    UNION ALL
    SELECT p.worker_name, w.scheduled_for, w.run_ids, w.attempts, w.last_status, w.last_error, w.finished_at
      FROM periods p
     CROSS JOIN LATERAL (
        SELECT a1.scheduled_for, c.run_ids, c.attempts, c.last_status, c.last_error, c.finished_at
          FROM scrinalia.archive_worker_runs a1
         CROSS JOIN LATERAL (
            WITH RECURSIVE chain AS (
                SELECT r.run_id, r.attempt, r.status, r.error, r.finished_at, r.retry_pending
                  FROM scrinalia.archive_worker_runs r WHERE r.run_id = a1.run_id
                UNION ALL
                SELECT r.run_id, r.attempt, r.status, r.error, r.finished_at, r.retry_pending
                  FROM scrinalia.archive_worker_runs r JOIN chain ON r.retry_of = chain.run_id
            )
            SELECT array_agg(chain.run_id ORDER BY chain.attempt) AS run_ids,
                   max(chain.attempt) AS attempts,
                   (array_agg(chain.status ORDER BY chain.attempt DESC))[1] AS last_status,
                   (array_agg(chain.error ORDER BY chain.attempt DESC))[1] AS last_error,
                   (array_agg(chain.finished_at ORDER BY chain.attempt DESC))[1] AS finished_at,
                   bool_or(chain.retry_pending OR chain.status IN ('QUEUED', 'RUNNING')) AS open
              FROM chain
         ) c
         WHERE a1.worker_name = p.worker_name AND a1.attempt = 1 AND a1.scheduled_for IS NOT NULL
           AND a1.status NOT IN ('QUEUED', 'RUNNING')
           AND (a1.run_id < p.run_id OR (a1.run_id = p.run_id AND NOT p.plain))
           AND NOT c.open
         ORDER BY a1.run_id DESC
         LIMIT 1
     ) w
     WHERE NOT p.plain OR p.open;
END
$$;

-- The alerts of now, one row each, in words an operator acts on. kind is one of
-- FAILED_AFTER_ALL_ATTEMPTS, SCHEDULE_OVERDUE, SCHEDULE_SET_ASIDE, LEASE_REAPED,
-- SCHEDULER_UNHEALTHY, INSTANT_REPAIRED (55_repair.sql: a next_run_at or a retry's
-- not_before no cron or policy could produce, repaired; a lease too long is reaped
-- and is a LEASE_REAPED). No row: nothing to do.
CREATE OR REPLACE FUNCTION scrinalia.current_alerts()
RETURNS TABLE (kind text, worker_name text, since timestamptz, run_ids bigint[], message text)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
SET jit = off
AS $$
    SELECT 'SCHEDULER_UNHEALTHY', NULL::text,
           coalesce(h.oldest_overdue_since, h.heartbeat_at), NULL::bigint[],
           'scheduling is not happening: ' || h.reason
      FROM scrinalia.scheduler_health() h
     WHERE NOT h.healthy
    UNION ALL
    SELECT 'FAILED_AFTER_ALL_ATTEMPTS', p.worker_name, p.finished_at, p.run_ids,
           format('the %s period of %s ended %s after %s attempt(s) (runs %s): %s',
                  to_char(p.scheduled_for AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI"Z"'), p.worker_name,
                  p.last_status, p.attempts, array_to_string(p.run_ids, ', '),
                  coalesce(left(split_part(p.last_error, E'\n', 1), 200), 'no error text'))
      FROM scrinalia.latest_finished_periods() p
     WHERE p.last_status IN ('FAILED', 'INTERRUPTED')
    UNION ALL
    SELECT 'SCHEDULE_OVERDUE', s.worker_name, coalesce(s.next_run_at, s.updated_at), NULL,
           format('the schedule of %s (%s, %s) was due at %s and has not been handled for %s: is a scheduler running?',
                  s.worker_name, s.cron, s.timezone, coalesce(s.next_run_at::text, 'arming'),
                  -- (a hand-written -infinity: overdue for ever, not an error that hides every alert)
                  coalesce(date_trunc('second', CASE WHEN isfinite(coalesce(s.next_run_at, s.updated_at))
                                                THEN now() - coalesce(s.next_run_at, s.updated_at) END)::text,
                           'ever'))
      FROM scrinalia.overdue_schedules() s
    UNION ALL
    SELECT 'SCHEDULE_SET_ASIDE', s.worker_name, s.arm_error_since, NULL,
           format('the scheduler cannot compute the schedule of %s (%s, %s): %s; fix it with put_schedule (next try %s)',
                  s.worker_name, s.cron, s.timezone, s.arm_error, s.arm_retry_at)
      FROM scrinalia.archive_worker_schedules s
     WHERE s.enabled AND s.arm_error IS NOT NULL
    UNION ALL
    SELECT 'LEASE_REAPED', r.worker_name, r.finished_at, ARRAY[r.run_id],
           format('run #%s of %s was interrupted: %s; did runner %s die?', r.run_id, r.worker_name,
                  r.error, coalesce(r.lease_owner, '?'))
      FROM scrinalia.archive_worker_runs r
     WHERE r.error_fingerprint = 'lease-expired' AND r.finished_at > now() - scrinalia.reaped_alert_window()
    UNION ALL
    SELECT 'INSTANT_REPAIRED', s.worker_name, s.last_skipped_at, NULL,
           format('the schedule of %s (%s, %s): %s; was the clock ahead, or was it written by hand?',
                  s.worker_name, s.cron, s.timezone, s.last_skip_reason)
      FROM scrinalia.archive_worker_schedules s
     WHERE s.last_skipped_at > now() - scrinalia.repair_alert_window()
       AND s.last_skip_reason LIKE 'instant repaired: %'
    UNION ALL
    SELECT 'INSTANT_REPAIRED', r.worker_name, r.not_before, ARRAY[r.run_id],
           format('run #%s of %s: %s; was the clock ahead, or was it written by hand?', r.run_id, r.worker_name,
                  r.error)
      FROM scrinalia.archive_worker_runs r
     WHERE r.status IN ('QUEUED', 'RUNNING') AND r.error_fingerprint = 'not-before-beyond-policy'
$$;

-- Per worker: what prometheus-postgres-exporter exposes as gauges and counters.
CREATE OR REPLACE FUNCTION scrinalia.worker_metrics()
RETURNS TABLE (worker_name text, scheduled integer, paused integer, overdue integer, set_aside integer,
               failed_after_all_attempts integer, retries_created bigint, periods_skipped bigint,
               last_lateness_seconds double precision, queue_pending bigint, queue_processed bigint,
               oldest_claimable_wait_seconds double precision)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
SET jit = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT w.worker_name,
           (s.worker_name IS NOT NULL)::int,
           coalesce((NOT s.enabled)::int, 0),
           (o.worker_name IS NOT NULL)::int,
           coalesce((s.enabled AND s.arm_error IS NOT NULL)::int, 0),
           coalesce((p.last_status IN ('FAILED', 'INTERRUPTED'))::int, 0),
           -- (ix_worker_runs_retries: the worker's retries, not every retry's row)
           (SELECT count(*) FROM scrinalia.archive_worker_runs r
             WHERE r.worker_name = w.worker_name AND r.retry_of IS NOT NULL),
           coalesce(s.skipped_count, 0),
           -- (unknown when either instant is hand-written outside the periods' range:
           -- an infinite one cannot be subtracted, and a lateness of millennia says nothing)
           (SELECT extract(epoch FROM r.created_at - r.scheduled_for)::float8
              FROM scrinalia.archive_worker_runs r WHERE r.run_id = s.last_run_id AND r.attempt = 1
               AND r.created_at >= scrinalia.period_start() AND r.created_at < scrinalia.period_end()
               AND r.scheduled_for >= scrinalia.period_start() AND r.scheduled_for < scrinalia.period_end()),
           q.pending, q.processed,
           -- (a hand-written -infinity counts from period_start(): old, and no error; a
           -- future one, +infinity included, from now(): no wait yet)
           (SELECT extract(epoch FROM now() - least(greatest(min(coalesce(r.not_before, r.created_at)),
                                                             scrinalia.period_start()), now()))::float8
              FROM scrinalia.archive_worker_runs r
             WHERE r.worker_name = w.worker_name AND r.status = 'QUEUED'
               AND (r.not_before IS NULL OR r.not_before <= now())
            HAVING count(*) > 0)
      FROM scrinalia.archive_workers w
      LEFT JOIN scrinalia.archive_worker_schedules s ON s.worker_name = w.worker_name
      LEFT JOIN scrinalia.worker_queue_counters q ON q.worker_name = w.worker_name
      LEFT JOIN scrinalia.overdue_schedules() o ON o.worker_name = w.worker_name
      LEFT JOIN scrinalia.latest_finished_periods() p ON p.worker_name = w.worker_name;
END
$$;

-- Per (worker, status, trigger): how many runs the ledger holds (prune_runs lowers it).
CREATE OR REPLACE FUNCTION scrinalia.run_counts()
RETURNS TABLE (worker_name text, status text, trigger text, runs bigint)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
SET jit = off
AS $$
    SELECT r.worker_name, r.status::text, r.trigger::text, count(*)
      FROM scrinalia.archive_worker_runs r
     GROUP BY 1, 2, 3
$$;

-- The scheduler as one row of numbers (1 = true).
CREATE OR REPLACE FUNCTION scrinalia.scheduler_metrics()
RETURNS TABLE (healthy integer, lock_held integer, holder_is_scheduler integer,
               heartbeat_timestamp_seconds double precision, heartbeat_age_seconds double precision,
               overdue_schedules integer, set_aside_schedules integer, ticks bigint,
               leases_reaped_last_hour bigint)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
SET jit = off
AS $$
    SELECT h.healthy::int, (h.holder_pid IS NOT NULL)::int, coalesce(h.holder_is_scheduler, false)::int,
           extract(epoch FROM h.heartbeat_at)::float8, extract(epoch FROM h.heartbeat_age)::float8,
           h.overdue_schedules, h.set_aside_schedules,
           (SELECT st.ticks FROM scrinalia.scheduler_state st),
           (SELECT count(*) FROM scrinalia.archive_worker_runs r
             WHERE r.error_fingerprint = 'lease-expired' AND r.finished_at > now() - scrinalia.reaped_alert_window())
      FROM scrinalia.scheduler_health() h
$$;
