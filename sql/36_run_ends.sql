-- The ends that are not the runner's: an operator's cancel, and the reaper (an expired
-- lease, a run past its worker's maximum run time).
-- Errors: SW011 run not found or not cancellable, SW032 not the scheduler (the reaper).
-- Channel: scrinalia_scheduler (work for it).

-- Cancels a QUEUED run (a retry waiting in its backoff included) or a RUNNING one: it
-- is CANCELLED at once and frees the slot; CANCELLED is never retried. A RUNNING run's
-- lease is fenced: its runner's next heartbeat or finish writes nothing and answers
-- "the run is CANCELLED (cancelled by ...)" (lease_problem), which tells it to stop.
CREATE OR REPLACE FUNCTION scrinalia.cancel_run(p_run_id bigint, p_cancelled_by text DEFAULT NULL)
RETURNS scrinalia.worker_run_v1
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
DECLARE
    cancelled record;  -- the run, as the functions return it (run_v1)
    who text := coalesce(scrinalia.check_actor('cancelled_by', p_cancelled_by), 'an operator');
BEGIN
    UPDATE scrinalia.archive_worker_runs r
       SET status = 'CANCELLED', finished_at = now(),
           duration = CASE WHEN r.status = 'RUNNING' AND isfinite(r.started_at) THEN now() - r.started_at END,
           error = CASE WHEN r.status = 'RUNNING'
                        THEN format('cancelled by %s while runner %s ran it', who, coalesce(r.lease_owner, '?'))
                        ELSE format('cancelled by %s', who) END,
           lease_token = NULL, lease_expires_at = NULL
     WHERE r.run_id = p_run_id AND r.status IN ('QUEUED', 'RUNNING')
    RETURNING scrinalia.run_v1(r) AS run INTO cancelled;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'SW011',
            MESSAGE = format('run #%s cannot be cancelled: %s', p_run_id,
                coalesce((SELECT format('it is %s', status) FROM scrinalia.archive_worker_runs
                           WHERE run_id = p_run_id), 'no such run')),
            HINT = 'only a QUEUED or RUNNING run can be cancelled; a finished one has ended already';
    END IF;
    RETURN cancelled.run;
END $$;

-- Ends the RUNNING runs nobody may keep running: those whose lease expired become
-- INTERRUPTED ('lease-expired'), and those that started longer ago than their worker's
-- maximum run time (max_run_time_of()) become INTERRUPTED too ('max-run-time', the
-- error naming the limit). A SCHEDULE attempt 1 or 2 is then marked for a retry. The lease is
-- fenced: the runner's next heartbeat or finish writes nothing and says why
-- (lease_problem). Returns the ended rows. Only the scheduler may (SW032,
-- check_scheduler_caller in 45_scheduler_lock.sql): every pass of it calls this, any
-- release's scheduler.
CREATE OR REPLACE FUNCTION scrinalia.reap_expired_leases()
RETURNS SETOF scrinalia.worker_run_v1
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
DECLARE n integer;
BEGIN
    PERFORM scrinalia.check_scheduler_caller('reap_expired_leases');
    RETURN QUERY
    WITH ended AS (
        -- (each condition one partial index of the RUNNING runs, a bitmap OR of them: the
        -- runs started longer ago than the shortest limit in use, then each its own)
        SELECT r.run_id, r.lease_expires_at <= now()
                         AND scrinalia.lease_held_until(r.lease_expires_at, r.lease_duration,
                                                        coalesce(r.heartbeat_at, r.started_at)) <= now() AS lease_ended
          FROM scrinalia.archive_worker_runs r
         WHERE r.status = 'RUNNING'
           AND ((r.lease_expires_at <= now()
                 -- (a lease that ran out while the server was down: see lease_held_until)
                 AND scrinalia.lease_held_until(r.lease_expires_at, r.lease_duration,
                                                coalesce(r.heartbeat_at, r.started_at)) <= now())
                OR (r.started_at <= now() - (SELECT least(scrinalia.default_max_run_time(), min(l.max_run_time))
                                              FROM scrinalia.archive_worker_limits l)
                    AND r.started_at + scrinalia.max_run_time_of(r.worker_name) <= now()))
         FOR UPDATE OF r SKIP LOCKED
    ), reaped AS (
        UPDATE scrinalia.archive_worker_runs r
           SET status = 'INTERRUPTED', finished_at = now(),
               -- (see finish_runs: one infinite start must not stop every reap, so every pass)
               duration = CASE WHEN isfinite(r.started_at) THEN now() - r.started_at END,
               error = CASE WHEN ended.lease_ended
                            THEN format('lease of runner %s expired at %s (last heartbeat %s)',
                                        r.lease_owner, r.lease_expires_at, r.heartbeat_at)
                            ELSE format('ran longer than its maximum run time of %s (started at %s by runner %s, last heartbeat %s)',
                                        scrinalia.max_run_time_of(r.worker_name),
                                        r.started_at, r.lease_owner, r.heartbeat_at) END,
               error_fingerprint = CASE WHEN ended.lease_ended THEN 'lease-expired' ELSE 'max-run-time' END,
               lease_token = NULL, lease_expires_at = NULL,
               retry_pending = scrinalia.owes_retry(r.trigger, 'INTERRUPTED', r.attempt)
          FROM ended
         WHERE r.run_id = ended.run_id
        RETURNING scrinalia.run_v1(r) AS run
    )
    SELECT (reaped.run).* FROM reaped;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n > 0 THEN
        PERFORM pg_notify('scrinalia_scheduler', 'reaped');
    END IF;
END $$;
