-- The leased claim: a runner takes QUEUED runs whose not_before has come.
-- Errors: SW022 bad runner id, lease or claim limit.

CREATE OR REPLACE FUNCTION scrinalia.check_runner(p_runner_id text, p_lease interval)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- ASCII only, as the runner's --runner-id parser: [[:alnum:]] would let any
    -- script's letters in, and lookalike letters make two runners read the same
    IF p_runner_id IS NULL OR p_runner_id !~ '^[A-Za-z0-9_.:@/-]+$'
       OR length(p_runner_id) > scrinalia.max_runner_id_length() THEN
        RAISE EXCEPTION USING ERRCODE = 'SW022',
            MESSAGE = format('invalid runner id %s', coalesce(quote_literal(left(p_runner_id, 100)), 'NULL')),
            HINT = format('a runner id is 1 to %s ASCII letters, digits or _ . : @ / -',
                          scrinalia.max_runner_id_length());
    END IF;
    IF p_lease IS NULL OR p_lease < scrinalia.min_lease() OR p_lease > scrinalia.max_lease() THEN
        -- (the words say min_lease() and max_lease(), which print as 00:00:01 and 1 day)
        RAISE EXCEPTION USING ERRCODE = 'SW022',
            MESSAGE = format('invalid lease %s: a lease is between 1 second and 1 day', coalesce(p_lease::text, 'NULL'));
    END IF;
END $$;

-- Claims up to p_limit claimable runs (not_before passed), oldest first, optionally
-- among p_workers: one round trip hands a runner several runs, of different workers
-- since a worker has one slot. Rows another claim holds are skipped (SKIP LOCKED);
-- each claimed run gets its own lease token. Returns no row when nothing is claimable.
-- The two branches are one query each: with "p_workers IS NULL OR ..." in one query
-- PL/pgSQL's generic plan filters instead of reading ix_worker_runs_queued in order.
CREATE OR REPLACE FUNCTION scrinalia.claim_runs(p_runner_id text, p_lease interval DEFAULT '5 minutes',
                                     p_workers text[] DEFAULT NULL, p_limit integer DEFAULT 1)
RETURNS SETOF scrinalia.worker_run_v1
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
SET jit = off
AS $$
BEGIN
    PERFORM scrinalia.check_runner(p_runner_id, p_lease);
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > scrinalia.max_claim_batch() THEN
        RAISE EXCEPTION USING ERRCODE = 'SW022',
            MESSAGE = format('invalid claim limit %s: between 1 and %s', coalesce(p_limit::text, 'NULL'),
                             scrinalia.max_claim_batch());
    END IF;
    IF p_workers IS NULL THEN
        RETURN QUERY
        WITH c AS (
            SELECT r.run_id FROM scrinalia.archive_worker_runs r
             WHERE r.status = 'QUEUED' AND (r.not_before IS NULL OR r.not_before <= now())
             ORDER BY r.created_at, r.run_id
             LIMIT p_limit
             FOR UPDATE SKIP LOCKED
        ), u AS (
            UPDATE scrinalia.archive_worker_runs r
               SET status = 'RUNNING', lease_owner = p_runner_id, lease_token = gen_random_uuid(),
                   lease_duration = p_lease, lease_expires_at = now() + p_lease,
                   heartbeat_at = now(), started_at = now()
              FROM c
             WHERE r.run_id = c.run_id
            RETURNING scrinalia.run_v1(r) AS run
        )
        SELECT (u.run).* FROM u ORDER BY (u.run).created_at, (u.run).run_id;
    ELSE
        RETURN QUERY
        WITH c AS (
            SELECT r.run_id FROM scrinalia.archive_worker_runs r
             WHERE r.status = 'QUEUED' AND (r.not_before IS NULL OR r.not_before <= now())
               AND r.worker_name = ANY (p_workers)
             ORDER BY r.created_at, r.run_id
             LIMIT p_limit
             FOR UPDATE SKIP LOCKED
        ), u AS (
            UPDATE scrinalia.archive_worker_runs r
               SET status = 'RUNNING', lease_owner = p_runner_id, lease_token = gen_random_uuid(),
                   lease_duration = p_lease, lease_expires_at = now() + p_lease,
                   heartbeat_at = now(), started_at = now()
              FROM c
             WHERE r.run_id = c.run_id
            RETURNING scrinalia.run_v1(r) AS run
        )
        SELECT (u.run).* FROM u ORDER BY (u.run).created_at, (u.run).run_id;
    END IF;
END $$;

-- Claims the oldest claimable run: claim_runs() with a limit of one.
CREATE OR REPLACE FUNCTION scrinalia.claim_next(p_runner_id text, p_lease interval DEFAULT '5 minutes',
                                     p_workers text[] DEFAULT NULL)
RETURNS SETOF scrinalia.worker_run_v1
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
BEGIN
    RETURN QUERY SELECT * FROM scrinalia.claim_runs(p_runner_id, p_lease, p_workers, 1);
END $$;

-- When the next QUEUED run among p_workers becomes claimable (NULL: none queued);
-- an idle runner sleeps until then unless a NOTIFY wakes it first. Only instants a
-- runner can compute a wait from (it subtracts now()): a run held back until
-- period_end() or later ('infinity', written by hand) is never claimable and left
-- out; one from before period_start() ('-infinity', 4713 BC) counts as from then.
CREATE OR REPLACE FUNCTION scrinalia.next_claimable_at(p_workers text[] DEFAULT NULL)
RETURNS timestamptz
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
    SELECT min(greatest(coalesce(r.not_before, r.created_at), scrinalia.period_start()))
      FROM scrinalia.archive_worker_runs r
     WHERE r.status = 'QUEUED' AND (p_workers IS NULL OR r.worker_name = ANY (p_workers))
       AND coalesce(r.not_before, r.created_at) < scrinalia.period_end()
$$;
