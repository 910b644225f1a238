-- What a runner reports: the outcome of a run it holds, one run or a batch.
-- Errors: SW020 lease lost, SW021 bad finish status, SW022 bad batch arrays.

-- What an outcome records: SUCCEEDED no error; FAILED and INTERRUPTED the error text
-- (capped; a default when none is given) and a fingerprint (the given one, else an md5
-- of the text with its digits masked, so that "disk 3 full" and "disk 4 full" group).
CREATE OR REPLACE FUNCTION scrinalia.outcome_error(p_status scrinalia.run_status, p_error text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN CASE WHEN p_status <> 'SUCCEEDED' THEN
        left(coalesce(p_error, lower(p_status::text) || ' without an error text'), scrinalia.max_error_length()) END;
END $$;

CREATE OR REPLACE FUNCTION scrinalia.outcome_fingerprint(p_status scrinalia.run_status, p_error text,
                                              p_fingerprint text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN CASE WHEN p_status <> 'SUCCEEDED' THEN
        left(coalesce(p_fingerprint, md5(regexp_replace(coalesce(p_error, ''), '[0-9]+', 'N', 'g'))),
             scrinalia.max_fingerprint_length()) END;
END $$;

-- SW021 unless the status is one a runner reports.
CREATE OR REPLACE FUNCTION scrinalia.check_outcome_status(p_status scrinalia.run_status)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_status IS NULL OR NOT p_status = ANY (scrinalia.outcome_statuses()) THEN
        RAISE EXCEPTION USING ERRCODE = 'SW021',
            MESSAGE = format('a runner reports SUCCEEDED or FAILED (or INTERRUPTED when it shuts down), not %s',
                             coalesce(p_status::text, 'NULL'));
    END IF;
END $$;

-- Reports the outcomes of several runs in one statement: SUCCEEDED, FAILED, or
-- INTERRUPTED (the runner shut down before its handler returned). A run that
-- owes_retry() (a SCHEDULE attempt below max_attempts() that FAILED or was INTERRUPTED,
-- the reaper's rule too) is marked for its retry; the scheduler creates it. The runner
-- itself never retries. One row per run: its status, whether a retry is owed, or NULL
-- and why the lease is lost (answered, not raised: the other outcomes still land).
CREATE OR REPLACE FUNCTION scrinalia.finish_runs(p_run_ids bigint[], p_lease_tokens uuid[],
                                      p_statuses scrinalia.run_status[], p_errors text[] DEFAULT NULL,
                                      p_error_fingerprints text[] DEFAULT NULL)
RETURNS TABLE (run_id bigint, status scrinalia.run_status, retry_pending boolean, lost_reason text)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
SET jit = off
SET plan_cache_mode = force_generic_plan  -- (its plan: see heartbeat_runs)
AS $$
DECLARE
    n integer := scrinalia.check_run_arrays('finish_runs', p_run_ids, p_lease_tokens,
                     ARRAY[cardinality(p_statuses), coalesce(cardinality(p_errors), cardinality(p_run_ids)),
                           coalesce(cardinality(p_error_fingerprints), cardinality(p_run_ids))]);
BEGIN
    IF NOT p_statuses <@ scrinalia.outcome_statuses() THEN  -- (an array holding NULL is not)
        PERFORM scrinalia.check_outcome_status(s) FROM (SELECT DISTINCT s FROM unnest(p_statuses) s) d;
    END IF;
    RETURN QUERY
    WITH i AS MATERIALIZED (
        -- (one unnest: a NULL p_errors or p_error_fingerprints reads as NULLs)
        SELECT i.run_id, i.lease_token, i.status, i.error, i.fingerprint,
               'RUNNING'::text AS running, now() AS as_of
          FROM unnest(p_run_ids, p_lease_tokens, p_statuses, p_errors, p_error_fingerprints)
               AS i(run_id, lease_token, status, error, fingerprint)
    ), u AS (
        UPDATE scrinalia.archive_worker_runs r
           SET status = i.status, finished_at = now(),
               -- (no duration from a hand-written infinite start: now() - it would fail
               -- the whole statement, the other runs of the batch with it)
               duration = CASE WHEN isfinite(r.started_at) THEN now() - r.started_at END,
               lease_token = NULL, lease_expires_at = NULL,
               -- a success records no error and owes no retry (the three functions' own
               -- answer, without their three calls a run)
               error = CASE WHEN i.status <> 'SUCCEEDED' THEN scrinalia.outcome_error(i.status, i.error) END,
               error_fingerprint = CASE WHEN i.status <> 'SUCCEEDED'
                                        THEN scrinalia.outcome_fingerprint(i.status, i.error, i.fingerprint) END,
               retry_pending = i.status <> 'SUCCEEDED' AND scrinalia.owes_retry(r.trigger, i.status, r.attempt)
          FROM i
         -- (conditions as join clauses: see heartbeat_runs; lease_held_until() is never
         -- before the expiry, so a lease not yet expired holds without its call)
         WHERE r.run_id = i.run_id AND r.status::text = i.running
           AND r.lease_token = i.lease_token
           AND (r.lease_expires_at > i.as_of
                OR scrinalia.lease_held_until(r.lease_expires_at, r.lease_duration,
                                              coalesce(r.heartbeat_at, r.started_at)) > i.as_of)
        RETURNING r.run_id, r.status, r.retry_pending
    )
    SELECT i.run_id, u.status, u.retry_pending,
           CASE WHEN u.run_id IS NULL
                THEN coalesce(scrinalia.lease_problem(i.run_id, i.lease_token), 'the lease ended meanwhile') END
      FROM i LEFT JOIN u ON u.run_id = i.run_id
     ORDER BY i.run_id;
    IF NOT p_statuses <@ '{SUCCEEDED}'::scrinalia.run_status[]  -- (successes owe no retry)
       AND EXISTS (SELECT 1 FROM scrinalia.archive_worker_runs r
                    WHERE r.run_id = ANY (p_run_ids) AND r.retry_pending) THEN
        PERFORM pg_notify('scrinalia_scheduler', 'retry');
    END IF;
END $$;

-- Reports the outcome of one run: finish_runs() for one run, a lost lease raised as
-- SW020; returns the finished row.
CREATE OR REPLACE FUNCTION scrinalia.finish(p_run_id bigint, p_lease_token uuid, p_status scrinalia.run_status,
                                 p_error text DEFAULT NULL, p_error_fingerprint text DEFAULT NULL)
RETURNS scrinalia.worker_run_v1
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
DECLARE
    lost text;
BEGIN
    IF p_run_id IS NULL THEN  -- a bad status (SW021), else a lease nobody holds, not malformed arrays
        PERFORM scrinalia.check_outcome_status(p_status);
        PERFORM scrinalia.raise_lease_lost(p_run_id, p_lease_token);
    END IF;
    SELECT b.lost_reason INTO lost
      FROM scrinalia.finish_runs(ARRAY[p_run_id], ARRAY[p_lease_token], ARRAY[p_status],
                                 ARRAY[p_error], ARRAY[p_error_fingerprint]) b;
    IF lost IS NOT NULL THEN
        PERFORM scrinalia.raise_lease_lost(p_run_id, p_lease_token);
    END IF;
    RETURN (SELECT scrinalia.run_v1(r) FROM scrinalia.archive_worker_runs r WHERE r.run_id = p_run_id);
END $$;
