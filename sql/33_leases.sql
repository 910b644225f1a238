-- A held run's lease: the fence every call of its runner goes through (a lost lease
-- answers why), the heartbeat, and giving unstarted runs back.
-- Errors: SW020 lease lost, SW022 bad batch arrays.

-- Why a heartbeat, finish or release with this token does not hold the run; NULL when
-- it does (RUNNING, this token, the lease not expired). A run that someone else ended
-- says how, so that a runner tells them apart: "the run is CANCELLED (cancelled by
-- ...)", "the run is INTERRUPTED (timed out: ...)" at its maximum run time, "the run is
-- INTERRUPTED (reaped: ...)" when its lease expired; a run its runner ended says "the
-- run is <status>" alone.
CREATE OR REPLACE FUNCTION scrinalia.lease_problem(p_run_id bigint, p_lease_token uuid)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
DECLARE r scrinalia.archive_worker_runs;
BEGIN
    SELECT * INTO r FROM scrinalia.archive_worker_runs WHERE run_id = p_run_id;
    RETURN CASE
        WHEN NOT FOUND THEN 'no such run'
        WHEN r.status <> 'RUNNING' THEN format('the run is %s', r.status) || CASE
            WHEN r.status = 'CANCELLED' THEN format(' (%s)', coalesce(r.error, 'cancelled'))
            WHEN r.error_fingerprint = 'max-run-time' THEN format(' (timed out: %s)', r.error)
            WHEN r.error_fingerprint = 'lease-expired' THEN format(' (reaped: %s)', r.error)
            ELSE '' END
        WHEN r.lease_token IS DISTINCT FROM p_lease_token THEN 'another lease holds it'
        WHEN r.lease_expires_at <= now() THEN format('the lease expired at %s', r.lease_expires_at)
    END;
END $$;

-- Why a heartbeat or finish with this token is refused.
CREATE OR REPLACE FUNCTION scrinalia.raise_lease_lost(p_run_id bigint, p_lease_token uuid)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'SW020',
        MESSAGE = format('lease lost for run #%s: %s', p_run_id,
                         coalesce(scrinalia.lease_problem(p_run_id, p_lease_token), 'the lease ended meanwhile')),
        HINT = 'the runner must stop working on this run and must not report it';
END $$;

-- The batch calls take parallel arrays, one element per run: they must be there and
-- of one length. Raises SW022 naming the call.
CREATE OR REPLACE FUNCTION scrinalia.check_run_arrays(p_call text, p_run_ids bigint[], p_lease_tokens uuid[],
                                           p_other_lengths integer[] DEFAULT '{}')
RETURNS integer
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n integer := cardinality(p_run_ids);
    bad text := format('%s takes arrays of one length, one element per run, and no NULL run id', p_call);
BEGIN
    PERFORM scrinalia.check_array_lengths('SW022', bad, ARRAY[n, cardinality(p_lease_tokens)] || p_other_lengths);
    IF array_position(p_run_ids, NULL) IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SW022', MESSAGE = bad;
    END IF;
    IF n > scrinalia.max_claim_batch() THEN
        RAISE EXCEPTION USING ERRCODE = 'SW022',
            MESSAGE = format('%s takes at most %s runs a call, not %s', p_call, scrinalia.max_claim_batch(), n);
    END IF;
    IF n > 1 AND (SELECT count(DISTINCT i) FROM unnest(p_run_ids) i) <> n THEN
        RAISE EXCEPTION USING ERRCODE = 'SW022', MESSAGE = format('%s: a run is named twice', p_call);
    END IF;
    RETURN n;
END $$;

-- Extends the leases of the given runs (the holder's tokens); one row per run: the new
-- expiry, or NULL and why the lease is lost. A lost lease is answered, not raised, so
-- that one lost run does not cost the others their heartbeat.
-- The plan of heartbeat_runs and finish_runs: a batch costs its own runs, found by
-- run_id (the primary key), however many others run and whatever the statistics say.
--   * Every condition on a run compares it with a column of the input (i.running,
--     i.as_of), never with a constant: join clauses, so that statistics taken while no
--     run was running (status, lease columns) cannot make a scan of the runs look
--     nearly empty, read first and joined to every run of the batch (quadratic).
--   * Status as text: never the partial lease index, which holds every running run.
--   * One plan per session (force_generic_plan): heartbeat() and finish() call them
--     with one run, whose plan always looks cheaper than the generic one, so they would
--     otherwise plan anew at every call, and the runner's batches with them.
CREATE OR REPLACE FUNCTION scrinalia.heartbeat_runs(p_run_ids bigint[], p_lease_tokens uuid[])
RETURNS TABLE (run_id bigint, lease_expires_at timestamptz, lost_reason text)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    PERFORM scrinalia.check_run_arrays('heartbeat_runs', p_run_ids, p_lease_tokens);
    RETURN QUERY
    WITH i AS MATERIALIZED (
        SELECT i.run_id, i.lease_token, 'RUNNING'::text AS running, now() AS as_of
          FROM unnest(p_run_ids, p_lease_tokens) AS i(run_id, lease_token)
    ), u AS (
        UPDATE scrinalia.archive_worker_runs r
           SET lease_expires_at = now() + r.lease_duration, heartbeat_at = now()
          FROM i
         WHERE r.run_id = i.run_id AND r.status::text = i.running
           AND r.lease_token = i.lease_token
           AND scrinalia.lease_held_until(r.lease_expires_at, r.lease_duration, coalesce(r.heartbeat_at, r.started_at)) > i.as_of
        RETURNING r.run_id, r.lease_expires_at
    )
    SELECT i.run_id, u.lease_expires_at,
           CASE WHEN u.run_id IS NULL
                THEN coalesce(scrinalia.lease_problem(i.run_id, i.lease_token), 'the lease ended meanwhile') END
      FROM i LEFT JOIN u ON u.run_id = i.run_id
     ORDER BY i.run_id;
END $$;

-- Extends the lease; returns the new expiry. Only the holder of a live lease may:
-- heartbeat_runs() for one run, a lost lease raised as SW020.
CREATE OR REPLACE FUNCTION scrinalia.heartbeat(p_run_id bigint, p_lease_token uuid)
RETURNS timestamptz
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
DECLARE
    expires timestamptz;
    lost text;
BEGIN
    IF p_run_id IS NULL THEN  -- a lease nobody holds, not malformed arrays (SW022)
        PERFORM scrinalia.raise_lease_lost(p_run_id, p_lease_token);
    END IF;
    SELECT b.lease_expires_at, b.lost_reason INTO expires, lost
      FROM scrinalia.heartbeat_runs(ARRAY[p_run_id], ARRAY[p_lease_token]) b;
    IF lost IS NOT NULL THEN
        PERFORM scrinalia.raise_lease_lost(p_run_id, p_lease_token);
    END IF;
    RETURN expires;
END $$;

-- Gives claimed runs whose handler has not started back to the queue (QUEUED, lease
-- and start cleared), so that another runner takes them: a runner that claimed a batch
-- and meets a slow handler, or shuts down, returns the rest. Returns the released ids;
-- a run whose lease is no longer this token's, or has expired, is left alone, as a
-- heartbeat or finish would be refused (SW020): an expired lease is the reaper's, and
-- goes through it (INTERRUPTED, its retry, its alert) whatever call the runner makes.
CREATE OR REPLACE FUNCTION scrinalia.release_runs(p_run_ids bigint[], p_lease_tokens uuid[])
RETURNS TABLE (run_id bigint)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
SET jit = off
AS $$
BEGIN
    PERFORM scrinalia.check_run_arrays('release_runs', p_run_ids, p_lease_tokens);
    RETURN QUERY
    UPDATE scrinalia.archive_worker_runs r
       SET status = 'QUEUED', lease_owner = NULL, lease_token = NULL, lease_duration = NULL,
           lease_expires_at = NULL, heartbeat_at = NULL, started_at = NULL
      FROM (SELECT u.run_id, u.lease_token, now() AS as_of
              FROM unnest(p_run_ids, p_lease_tokens) AS u(run_id, lease_token)) i
     -- status as text, the expiry against a column: by run_id, never the lease index
     -- (see heartbeat_runs)
     WHERE r.run_id = i.run_id AND r.status::text = 'RUNNING' AND r.lease_token = i.lease_token
       AND r.lease_expires_at > i.as_of
    RETURNING r.run_id;
    IF FOUND THEN
        PERFORM pg_notify('scrinalia_runs', 'released');
    END IF;
END $$;
