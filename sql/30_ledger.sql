-- The ledger as a queue: enqueue into the one slot, the leased claim, heartbeat,
-- finish, cancel and the lease reaper.
-- Errors: SW010 slot busy (an API answers 409), SW011 run not found or not cancellable,
-- SW020 lease lost, SW021 bad finish status, SW022 bad runner id or lease.
-- Channels: scrinalia_runs (a run may be claimable), scrinalia_scheduler (work for it).

-- How the slot's current holder reads in an error message: the QUEUED/RUNNING run,
-- or else a failed scheduled attempt whose retry is owed (ADR 0015: the retry owns
-- the slot from the moment of the failure, whether or not a scheduler runs). NULL
-- when the slot is free.
CREATE OR REPLACE FUNCTION scrinalia.describe_slot_holder(p_worker_name text)
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
    SELECT coalesce(
        (SELECT format('run #%s %s (%s%s%s)', r.run_id, r.status, r.trigger,
                       CASE WHEN r.trigger = 'SCHEDULE'
                            THEN format(' attempt %s/%s', r.attempt, scrinalia.max_attempts()) ELSE '' END,
                       CASE WHEN r.not_before > now()
                            THEN format(', retry not before %s',
                                        to_char(r.not_before AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'))
                            ELSE '' END)
           FROM scrinalia.archive_worker_runs r
          WHERE r.worker_name = p_worker_name AND r.status IN ('QUEUED', 'RUNNING')),
        (SELECT format('run #%s %s (SCHEDULE attempt %s/%s) is owed its retry, which the scheduler creates',
                       p.run_id, p.status, p.attempt, scrinalia.max_attempts())
           FROM scrinalia.archive_worker_runs p
          WHERE p.worker_name = p_worker_name AND p.retry_pending
          ORDER BY p.run_id LIMIT 1))
$$;

CREATE OR REPLACE FUNCTION scrinalia.raise_slot_busy(p_worker_name text, p_holder text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'SW010',
        MESSAGE = format('worker %L is busy: %s', p_worker_name, p_holder),
        HINT = 'one run per worker at a time: wait for it to finish, or cancel a queued run (a retry waiting for its moment too)';
END $$;

CREATE OR REPLACE FUNCTION scrinalia.enqueue(p_worker_name text, p_request jsonb DEFAULT '{}',
                                  p_trigger scrinalia.run_trigger DEFAULT 'MANUAL',
                                  p_requested_by text DEFAULT NULL)
RETURNS scrinalia.archive_worker_runs
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
DECLARE
    req jsonb;
    rc record;
    run scrinalia.archive_worker_runs;
    active text;
BEGIN
    IF p_trigger IS NULL OR p_trigger NOT IN ('MANUAL', 'CLI') THEN
        RAISE EXCEPTION USING ERRCODE = 'SW002',
            MESSAGE = format('enqueue takes trigger MANUAL or CLI, not %s', coalesce(p_trigger::text, 'NULL')),
            HINT = 'SCHEDULE runs are created by the scheduler''s tick';
    END IF;
    req := scrinalia.validate_request(p_worker_name, p_request);
    PERFORM scrinalia.check_actor('requested_by', p_requested_by);
    active := scrinalia.describe_slot_holder(p_worker_name);
    IF active IS NOT NULL THEN
        PERFORM scrinalia.raise_slot_busy(p_worker_name, active);
    END IF;
    rc := scrinalia.resolve_config(p_worker_name, req);
    BEGIN
        INSERT INTO scrinalia.archive_worker_runs
               (worker_name, trigger, request, config, config_sources, requested_by)
        VALUES (p_worker_name, p_trigger, req, rc.config, rc.sources, p_requested_by)
        RETURNING * INTO run;
    EXCEPTION WHEN unique_violation THEN
        -- a concurrent enqueue or tick took the slot after the check above
        PERFORM scrinalia.raise_slot_busy(p_worker_name,
                    coalesce(scrinalia.describe_slot_holder(p_worker_name), 'a concurrent run'));
    END;
    PERFORM pg_notify('scrinalia_runs', p_worker_name);
    RETURN run;
END $$;

CREATE OR REPLACE FUNCTION scrinalia.check_runner(p_runner_id text, p_lease interval)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- ASCII only, as the runner's --runner-id parser: [[:alnum:]] would let any
    -- script's letters in, and lookalike letters make two runners read the same
    IF p_runner_id IS NULL OR p_runner_id !~ '^[A-Za-z0-9_.:@/-]{1,200}$' THEN
        RAISE EXCEPTION USING ERRCODE = 'SW022',
            MESSAGE = format('invalid runner id %s', coalesce(quote_literal(left(p_runner_id, 100)), 'NULL')),
            HINT = 'a runner id is 1 to 200 ASCII letters, digits or _ . : @ / -';
    END IF;
    IF p_lease IS NULL OR p_lease < interval '1 second' OR p_lease > interval '1 day' THEN
        RAISE EXCEPTION USING ERRCODE = 'SW022',
            MESSAGE = format('invalid lease %s: a lease is between 1 second and 1 day', coalesce(p_lease::text, 'NULL'));
    END IF;
END $$;

-- Claims the oldest claimable run (not_before passed), optionally among p_workers.
-- Returns no row when there is nothing to claim.
CREATE OR REPLACE FUNCTION scrinalia.claim_next(p_runner_id text, p_lease interval DEFAULT '5 minutes',
                                     p_workers text[] DEFAULT NULL)
RETURNS SETOF scrinalia.archive_worker_runs
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
BEGIN
    PERFORM scrinalia.check_runner(p_runner_id, p_lease);
    RETURN QUERY
    WITH c AS (
        SELECT r.run_id FROM scrinalia.archive_worker_runs r
         WHERE r.status = 'QUEUED'
           AND (r.not_before IS NULL OR r.not_before <= now())
           AND (p_workers IS NULL OR r.worker_name = ANY (p_workers))
         ORDER BY r.created_at, r.run_id
         LIMIT 1
         FOR UPDATE SKIP LOCKED
    )
    UPDATE scrinalia.archive_worker_runs r
       SET status = 'RUNNING', lease_owner = p_runner_id, lease_token = gen_random_uuid(),
           lease_duration = p_lease, lease_expires_at = now() + p_lease,
           heartbeat_at = now(), started_at = now()
      FROM c
     WHERE r.run_id = c.run_id
    RETURNING r.*;
END $$;

-- Why a heartbeat or finish with this token is refused.
CREATE OR REPLACE FUNCTION scrinalia.raise_lease_lost(p_run_id bigint, p_lease_token uuid)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
DECLARE r scrinalia.archive_worker_runs;
BEGIN
    SELECT * INTO r FROM scrinalia.archive_worker_runs WHERE run_id = p_run_id;
    RAISE EXCEPTION USING ERRCODE = 'SW020',
        MESSAGE = format('lease lost for run #%s: %s', p_run_id,
            CASE
                WHEN NOT FOUND THEN 'no such run'
                WHEN r.status <> 'RUNNING' THEN format('the run is %s', r.status)
                WHEN r.lease_token IS DISTINCT FROM p_lease_token THEN 'another lease holds it'
                ELSE format('the lease expired at %s', r.lease_expires_at)
            END),
        HINT = 'the runner must stop working on this run and must not report it';
END $$;

-- Extends the lease; returns the new expiry. Only the holder of a live lease may.
CREATE OR REPLACE FUNCTION scrinalia.heartbeat(p_run_id bigint, p_lease_token uuid)
RETURNS timestamptz
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
DECLARE expires timestamptz;
BEGIN
    UPDATE scrinalia.archive_worker_runs
       SET lease_expires_at = now() + lease_duration, heartbeat_at = now()
     WHERE run_id = p_run_id AND status = 'RUNNING'
       AND lease_token = p_lease_token AND lease_expires_at > now()
    RETURNING lease_expires_at INTO expires;
    IF NOT FOUND THEN
        PERFORM scrinalia.raise_lease_lost(p_run_id, p_lease_token);
    END IF;
    RETURN expires;
END $$;

-- Reports the outcome: SUCCEEDED, FAILED, or INTERRUPTED (the runner shut down
-- before its handler returned). A run that owes_retry() (a SCHEDULE attempt below
-- max_attempts() that FAILED or was INTERRUPTED, the reaper's rule too) is marked for
-- its retry; the scheduler creates it. The runner itself never retries.
CREATE OR REPLACE FUNCTION scrinalia.finish(p_run_id bigint, p_lease_token uuid, p_status scrinalia.run_status,
                                 p_error text DEFAULT NULL, p_error_fingerprint text DEFAULT NULL)
RETURNS scrinalia.archive_worker_runs
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
DECLARE run scrinalia.archive_worker_runs;
BEGIN
    IF p_status IS NULL OR p_status NOT IN ('SUCCEEDED', 'FAILED', 'INTERRUPTED') THEN
        RAISE EXCEPTION USING ERRCODE = 'SW021',
            MESSAGE = format('a runner reports SUCCEEDED or FAILED (or INTERRUPTED when it shuts down), not %s',
                             coalesce(p_status::text, 'NULL'));
    END IF;
    UPDATE scrinalia.archive_worker_runs
       SET status = p_status, finished_at = now(), duration = now() - started_at,
           lease_token = NULL, lease_expires_at = NULL,
           error = CASE WHEN p_status <> 'SUCCEEDED' THEN
               left(coalesce(p_error, lower(p_status::text) || ' without an error text'), 10000) END,
           error_fingerprint = CASE WHEN p_status <> 'SUCCEEDED' THEN
               left(coalesce(p_error_fingerprint,
                             md5(regexp_replace(coalesce(p_error, ''), '[0-9]+', 'N', 'g'))), 200) END,
           retry_pending = scrinalia.owes_retry(trigger, p_status, attempt)
     WHERE run_id = p_run_id AND status = 'RUNNING'
       AND lease_token = p_lease_token AND lease_expires_at > now()
    RETURNING * INTO run;
    IF NOT FOUND THEN
        PERFORM scrinalia.raise_lease_lost(p_run_id, p_lease_token);
    END IF;
    IF run.retry_pending THEN
        PERFORM pg_notify('scrinalia_scheduler', 'retry');
    END IF;
    RETURN run;
END $$;

-- Cancels a QUEUED run (a retry waiting in its backoff included): frees the slot.
-- CANCELLED is never retried.
CREATE OR REPLACE FUNCTION scrinalia.cancel_run(p_run_id bigint, p_cancelled_by text DEFAULT NULL)
RETURNS scrinalia.archive_worker_runs
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
DECLARE run scrinalia.archive_worker_runs;
BEGIN
    UPDATE scrinalia.archive_worker_runs
       SET status = 'CANCELLED', finished_at = now(),
           error = format('cancelled by %s',
                          coalesce(scrinalia.check_actor('cancelled_by', p_cancelled_by), 'an operator'))
     WHERE run_id = p_run_id AND status = 'QUEUED'
    RETURNING * INTO run;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'SW011',
            MESSAGE = format('run #%s cannot be cancelled: %s', p_run_id,
                coalesce((SELECT format('it is %s', status) FROM scrinalia.archive_worker_runs
                           WHERE run_id = p_run_id), 'no such run')),
            HINT = 'only a QUEUED run can be cancelled; a RUNNING one ends with its lease';
    END IF;
    RETURN run;
END $$;

-- RUNNING rows whose lease expired become INTERRUPTED (a SCHEDULE attempt 1 or 2 is
-- then marked for a retry). Returns the reaped rows.
CREATE OR REPLACE FUNCTION scrinalia.reap_expired_leases()
RETURNS SETOF scrinalia.archive_worker_runs
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
DECLARE n integer;
BEGIN
    RETURN QUERY
    WITH expired AS (
        SELECT r.run_id FROM scrinalia.archive_worker_runs r
         WHERE r.status = 'RUNNING' AND r.lease_expires_at <= now()
         FOR UPDATE SKIP LOCKED
    )
    UPDATE scrinalia.archive_worker_runs r
       SET status = 'INTERRUPTED', finished_at = now(), duration = now() - r.started_at,
           error = format('lease of runner %s expired at %s (last heartbeat %s)',
                          r.lease_owner, r.lease_expires_at, r.heartbeat_at),
           error_fingerprint = 'lease-expired',
           lease_token = NULL, lease_expires_at = NULL,
           retry_pending = scrinalia.owes_retry(r.trigger, 'INTERRUPTED', r.attempt)
      FROM expired
     WHERE r.run_id = expired.run_id
    RETURNING r.*;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n > 0 THEN
        PERFORM pg_notify('scrinalia_scheduler', 'reaped');
    END IF;
END $$;

-- When the next QUEUED run among p_workers becomes claimable (NULL: none queued);
-- an idle runner sleeps until then unless a NOTIFY wakes it first.
CREATE OR REPLACE FUNCTION scrinalia.next_claimable_at(p_workers text[] DEFAULT NULL)
RETURNS timestamptz
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
    SELECT min(coalesce(r.not_before, r.created_at))
      FROM scrinalia.archive_worker_runs r
     WHERE r.status = 'QUEUED' AND (p_workers IS NULL OR r.worker_name = ANY (p_workers))
$$;
