-- Stored instants no cron or policy could have produced (a clock that ran ahead and
-- came back, a hand-written or forged value), found and repaired so that they cannot
-- stall a worker for good.
-- The scheduler repairs at its first pass and then about once a minute
-- (scheduler/tick.py); each repair is a log line and an alert (88_alerts.sql).
-- Errors: SW030 bad instants.

-- Leases and retry delays beyond what a runner or the policy can ask for, repaired:
-- a RUNNING run whose lease ends later than now() + max_lease() is reaped at once
-- (INTERRUPTED as by an expired lease: a LEASE_REAPED alert, its retry if owed); a
-- queued run held back (not_before) later than its creation + retry_max_delay() gets
-- that instant instead, and keeps why in its error and error_fingerprint
-- 'not-before-beyond-policy' until it runs (an INSTANT_REPAIRED alert).
-- The cron masks the tick checks next instants with, for the schedules written
-- without put_schedule(s) (by hand, a bulk load): without them the tick checks those
-- the slow way, every pass. A save of the same new cron not committed yet is not
-- waited for (it stores them itself): the next repair looks again.
CREATE OR REPLACE FUNCTION scrinalia.store_missing_cron_masks()
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, scrinalia, pg_temp
SET lock_timeout = '100ms'
AS $$
BEGIN
    PERFORM scrinalia.store_cron_masks(
        ARRAY(SELECT DISTINCT s.cron FROM scrinalia.archive_worker_schedules s
               WHERE s.enabled AND NOT EXISTS (SELECT FROM scrinalia.archive_cron_masks m WHERE m.cron = s.cron)),
        false);
EXCEPTION WHEN lock_not_available THEN
    NULL;
END $$;

CREATE OR REPLACE FUNCTION scrinalia.repair_instants(p_repaired_by text DEFAULT NULL)
RETURNS TABLE (kind text, worker_name text, run_id bigint, was timestamptz, repaired_to timestamptz, message text)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
DECLARE
    by_whom text := coalesce(scrinalia.check_actor('repaired_by', p_repaired_by), 'the scheduler');
    n integer;
BEGIN
    PERFORM scrinalia.check_scheduler_caller('repair_instants');
    PERFORM scrinalia.store_missing_cron_masks();
    RETURN QUERY
    -- (an instant a client cannot read, 'infinity' or the year 20000, is returned NULL)
    WITH long AS (
        SELECT r.run_id, r.lease_expires_at AS was FROM scrinalia.archive_worker_runs r
         WHERE r.status = 'RUNNING' AND r.lease_expires_at > now() + scrinalia.max_lease()
         FOR UPDATE SKIP LOCKED
    )
    UPDATE scrinalia.archive_worker_runs r
       SET status = 'INTERRUPTED', finished_at = now(),
           duration = CASE WHEN isfinite(r.started_at) THEN now() - r.started_at END,
           error = format('lease of runner %s ran until %s, longer than a runner may take (%s): reaped by %s',
                          r.lease_owner, long.was, scrinalia.max_lease(), by_whom),
           -- (the reaper's fingerprint: the same alert and metric as an expired lease)
           error_fingerprint = 'lease-expired',
           lease_token = NULL, lease_expires_at = NULL,
           retry_pending = scrinalia.owes_retry(r.trigger, 'INTERRUPTED', r.attempt)
      FROM long
     WHERE r.run_id = long.run_id
    RETURNING 'LEASE', r.worker_name, r.run_id, CASE WHEN long.was < scrinalia.period_end() THEN long.was END, now(), r.error;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n > 0 THEN
        PERFORM pg_notify('scrinalia_scheduler', 'reaped');
    END IF;

    RETURN QUERY
    WITH late AS (
        SELECT r.run_id, r.not_before AS was, r.created_at + scrinalia.retry_max_delay() AS cap
          FROM scrinalia.archive_worker_runs r
         WHERE r.status = 'QUEUED' AND r.not_before > r.created_at + scrinalia.retry_max_delay()
         FOR UPDATE SKIP LOCKED
    )
    UPDATE scrinalia.archive_worker_runs r
       SET not_before = late.cap,
           error = format('not_before %s was later than its creation + the longest retry delay (%s): set to %s by %s',
                          late.was, scrinalia.retry_max_delay(), late.cap, by_whom),
           error_fingerprint = 'not-before-beyond-policy'
      FROM late
     WHERE r.run_id = late.run_id
    RETURNING 'NOT_BEFORE', r.worker_name, r.run_id, CASE WHEN late.was < scrinalia.period_end() THEN late.was END,
              CASE WHEN late.cap < scrinalia.period_end() THEN late.cap END, r.error;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n > 0 THEN
        PERFORM pg_notify('scrinalia_runs', 'repaired');
    END IF;
END $$;

-- The distinct (cron, zone) of the armed schedules (enabled, not set aside, due
-- later), with the transaction's now(): the scheduler computes each one's next
-- occurrence after it and hands them to rearm_schedules_ahead().
CREATE OR REPLACE FUNCTION scrinalia.armed_schedule_crons()
RETURNS TABLE (cron text, timezone text, db_now timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
SET jit = off
AS $$
    SELECT DISTINCT s.cron, s.timezone, now()
      FROM scrinalia.archive_worker_schedules s
     WHERE s.enabled AND s.arm_error IS NULL
       AND s.next_run_at > now() AND s.next_run_at < scrinalia.period_end()
     ORDER BY 1, 2
$$;

-- Re-arms the schedules of each (cron, zone) whose next_run_at is later than p_next
-- ('infinity' and the like are the tick's: due_schedules() re-arms them),
-- that pair's next occurrence after now(): no cron puts it further ahead, so such an
-- instant was written by a clock that ran ahead or by hand, and would stall the
-- worker. Each p_next must be an occurrence after now(), else SW030 and nothing is
-- written. Rows another transaction holds (a tick) are left for the next repair. The
-- schedule keeps why in last_skipped_at and last_skip_reason (an INSTANT_REPAIRED alert).
CREATE OR REPLACE FUNCTION scrinalia.rearm_schedules_ahead(p_crons text[], p_zones text[], p_next timestamptz[],
                                                p_repaired_by text DEFAULT NULL)
RETURNS TABLE (worker_name text, cron text, timezone text, was timestamptz, next_run_at timestamptz)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
-- (the schedules join the pairs by hash: a merge join, which the planner chose, sorted
-- every schedule on its cron and zone text first, at every repair)
SET enable_mergejoin = off
AS $$
DECLARE
    by_whom text := coalesce(scrinalia.check_actor('repaired_by', p_repaired_by), 'the scheduler');
    bad text;
BEGIN
    PERFORM scrinalia.check_scheduler_caller('rearm_schedules_ahead');
    PERFORM scrinalia.check_array_lengths(
        'SW030', 'rearm_schedules_ahead takes three arrays of one length: crons, zones, next occurrences',
        ARRAY[cardinality(p_crons), cardinality(p_zones), cardinality(p_next)]);
    SELECT min(format('"%s" in %s -> %s', i.c, i.z, coalesce(i.n::text, 'NULL'))) INTO bad
      FROM unnest(p_crons, p_zones, p_next) AS i(c, z, n)
     WHERE i.n IS NULL OR i.n <= now() OR i.n >= scrinalia.period_end()
        OR NOT scrinalia.cron_fires_at(i.c, i.z, i.n);
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SW030',
            MESSAGE = format('rearm_schedules_ahead: every instant must be an occurrence of its cron after now() (%s): %s',
                             now(), bad);
    END IF;
    RETURN QUERY
    WITH ahead AS (
        SELECT s.worker_name, s.next_run_at AS was, i.n
          FROM unnest(p_crons, p_zones, p_next) AS i(c, z, n)
          JOIN scrinalia.archive_worker_schedules s ON s.cron = i.c AND s.timezone = i.z
         WHERE s.enabled AND s.arm_error IS NULL AND s.next_run_at > i.n
           AND s.next_run_at < scrinalia.period_end()
           FOR UPDATE OF s SKIP LOCKED
    )
    UPDATE scrinalia.archive_worker_schedules s
       SET next_run_at = a.n, last_skipped_at = now(),
           last_skip_reason = format('instant repaired: next_run_at %s was later than the next occurrence of its cron (%s); re-armed by %s',
                                     a.was, a.n, by_whom)
      FROM ahead a
     WHERE s.worker_name = a.worker_name
    RETURNING s.worker_name, s.cron, s.timezone, a.was, s.next_run_at;
END $$;

GRANT EXECUTE ON FUNCTION
    scrinalia.repair_instants(text),
    scrinalia.armed_schedule_crons(),
    scrinalia.rearm_schedules_ahead(text[], text[], timestamptz[], text)
   TO scrinalia_scheduler, scrinalia_operator, scrinalia_runner;
-- pure helpers, as validate_cron
GRANT EXECUTE ON FUNCTION scrinalia.cron_fires_at(text, text, timestamptz), scrinalia.cron_field_values(text, integer)
   TO scrinalia_reader, scrinalia_operator, scrinalia_runner, scrinalia_scheduler;
