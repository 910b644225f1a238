-- The ledger as a queue: enqueue into the one slot, the leased claim, heartbeat,
-- finish, cancel and the lease reaper.
-- Errors: SW010 slot busy (an API answers 409), SW011 run not found or not cancellable,
-- SW020 lease lost, SW021 bad finish status, SW022 bad runner id, lease, claim limit or
-- batch arrays.
-- Channels: scrinalia_runs (a run may be claimable), scrinalia_scheduler (work for it).

-- How the slot's current holder reads in an error message: the QUEUED/RUNNING run,
-- or else a failed scheduled attempt whose retry is owed (ADR 0015: the retry owns
-- the slot from the moment of the failure, whether or not a scheduler runs). NULL
-- when the slot is free. PL/pgSQL: enqueue asks at every busy slot, and a SQL function
-- that cannot be inlined (its SET clause) is parsed and planned again each time. Its
-- plan is kept for the session, so it must not depend on the ledger's statistics: planned
-- while they said the ledger was empty (analyzed empty, or pruned), a scan of the
-- whole ledger would make each call of a long transaction slower than the last as its
-- runs accumulate. No sequential scan, and the owed retry looked up in its partial
-- index before the ordering (OFFSET 0), not found along the primary key's order.
CREATE OR REPLACE FUNCTION scrinalia.describe_slot_holder(p_worker_name text)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, scrinalia, pg_temp
SET enable_seqscan = off
AS $$
BEGIN
    RETURN coalesce(
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
           FROM (SELECT o.run_id, o.status, o.attempt FROM scrinalia.archive_worker_runs o
                  WHERE o.worker_name = p_worker_name AND o.retry_pending OFFSET 0) p
          ORDER BY p.run_id LIMIT 1));
END $$;

CREATE OR REPLACE FUNCTION scrinalia.raise_slot_busy(p_worker_name text, p_holder text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'SW010',
        MESSAGE = format('worker %L is busy: %s', p_worker_name, p_holder),
        HINT = 'one run per worker at a time: wait for it to finish, or cancel it (a queued or running run, a retry waiting for its moment too)';
END $$;

CREATE OR REPLACE FUNCTION scrinalia.enqueue(p_worker_name text, p_request jsonb DEFAULT '{}',
                                  p_trigger scrinalia.run_trigger DEFAULT 'MANUAL',
                                  p_requested_by text DEFAULT NULL)
RETURNS scrinalia.archive_worker_runs
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
-- its plans are kept for the session: none may scan the ledger whole for having been
-- made while the statistics said it was empty (see describe_slot_holder)
SET enable_seqscan = off
AS $$
DECLARE
    req jsonb;
    d jsonb;            -- the layers: the signature default, the persisted settings,
    s jsonb;            -- the worker's presets
    presets jsonb;
    resolved record;    -- config_of(): the config and its sources
    run scrinalia.archive_worker_runs;
BEGIN
    IF p_trigger IS NULL OR p_trigger NOT IN ('MANUAL', 'CLI') THEN
        RAISE EXCEPTION USING ERRCODE = 'SW002',
            MESSAGE = format('enqueue takes trigger MANUAL or CLI, not %s', coalesce(p_trigger::text, 'NULL')),
            HINT = 'SCHEDULE runs are created by the scheduler''s tick';
    END IF;
    -- an empty request is valid for every worker (validate_request would return it
    -- after require_worker's check): the common case's check is the lookup below
    IF coalesce(p_request, '{}') = '{}' THEN
        req := '{}';
    ELSE
        req := scrinalia.validate_request(p_worker_name, p_request);
    END IF;
    -- The worker's slot is taken for this transaction's decision before its run is
    -- inserted: the catalogue row FOR SHARE (create_retries skips a worker so held),
    -- the schedule's row FOR KEY SHARE (the tick's FOR UPDATE ... SKIP LOCKED skips
    -- it). A transaction left open after an enqueue then holds back that one worker's
    -- period and retry, decided once it ends, instead of the tick waiting on the
    -- one-slot index entry of an insert not yet committed (a unique check waits for the
    -- inserter; the wait would cost every worker of the tick's chunk). Neither lock
    -- stops a foreign-key check (KEY SHARE) or put_schedule's update (NO KEY UPDATE).
    -- First, so that the check below sees what a tick deciding this worker committed.
    -- The catalogue row's lookup reads the config's layers too.
    SELECT coalesce(wk.default_config, '{}'), coalesce(st.settings, '{}'), coalesce(wk.presets, '{}')
      INTO d, s, presets
      FROM scrinalia.archive_workers wk
      LEFT JOIN scrinalia.archive_worker_settings st ON st.worker_name = wk.worker_name
     WHERE wk.worker_name = p_worker_name
       FOR SHARE OF wk;
    IF NOT FOUND THEN
        PERFORM scrinalia.require_worker(p_worker_name);  -- raises its SW001
    END IF;
    IF length(p_requested_by) > scrinalia.max_actor_length() THEN  -- (a call costs more than the test)
        PERFORM scrinalia.check_actor('requested_by', p_requested_by);  -- raises its SW002
    END IF;
    PERFORM FROM scrinalia.archive_worker_schedules sc WHERE sc.worker_name = p_worker_name FOR KEY SHARE;
    resolved := scrinalia.config_of(d, s, presets, req);
    -- The slot is free when the worker has no QUEUED/RUNNING run (the one-slot index
    -- answers) and no owed retry (looked up): the insert checks both, and no row
    -- inserted means it is not, which describe_slot_holder says why.
    -- No subtransaction (an EXCEPTION block) on the way of every call: in a long
    -- transaction each one's XID stayed locked until its end and overflowed the
    -- session's subtransaction cache, so that every call cost more than the one
    -- before, and every other session's snapshot checks too. A QUEUED/RUNNING run is a
    -- conflict of the one-slot index, which DO NOTHING answers with no row (the insert
    -- waits for an uncommitted one). Under REPEATABLE READ or SERIALIZABLE, DO NOTHING
    -- would raise a serialization failure for a run its snapshot cannot see: the
    -- exception block there, to answer SW010 as always.
    IF current_setting('transaction_isolation') = 'read committed' THEN
        INSERT INTO scrinalia.archive_worker_runs
               (worker_name, trigger, request, config, config_sources, requested_by)
        SELECT p_worker_name, p_trigger, req, resolved.config, resolved.sources, p_requested_by
         WHERE NOT EXISTS (SELECT FROM scrinalia.archive_worker_runs o
                            WHERE o.worker_name = p_worker_name AND o.retry_pending)
        ON CONFLICT (worker_name) WHERE status IN ('QUEUED', 'RUNNING') DO NOTHING
        RETURNING * INTO run;
    ELSE
        BEGIN
            INSERT INTO scrinalia.archive_worker_runs
                   (worker_name, trigger, request, config, config_sources, requested_by)
            SELECT p_worker_name, p_trigger, req, resolved.config, resolved.sources, p_requested_by
             WHERE NOT EXISTS (SELECT FROM scrinalia.archive_worker_runs o
                                WHERE o.worker_name = p_worker_name AND o.retry_pending)
            RETURNING * INTO run;
        EXCEPTION WHEN unique_violation THEN
            run := NULL;
        END;
    END IF;
    IF run.run_id IS NULL THEN
        PERFORM scrinalia.raise_slot_busy(p_worker_name,
                    coalesce(scrinalia.describe_slot_holder(p_worker_name), 'a concurrent run'));
    END IF;
    PERFORM pg_notify('scrinalia_runs', p_worker_name);
    RETURN run;
END $$;

-- The set-based enqueue: one run for each (worker, request) pair, all or nothing, each
-- held to enqueue's rules exactly (the trigger, the catalogue, the request,
-- requested_by, the slot and the owed retry). p_requests NULL: '{}' for every worker;
-- else one per worker (a NULL element is '{}', as enqueue's NULL request). Each check
-- runs once over the whole batch, in enqueue's order after the shape (the arrays, a
-- worker named twice: which of its requests would be meant?), each non-empty request
-- once; the first element failing the first failing check is reported with enqueue's
-- error, prefixed "enqueue #N (worker 'x'): ", N counting from 1; a busy slot's DETAIL
-- names the batch's other busy workers. The slots are taken as enqueue takes them
-- (catalogue rows FOR SHARE, schedule rows FOR KEY SHARE), in worker order, and the
-- runs inserted in worker order, so that two batches sharing workers cannot deadlock;
-- a batch waits only where an enqueue() of one of its workers would wait. One NOTIFY
-- per run, as enqueue sends. Returns the new runs in worker order (their run_id order).
CREATE OR REPLACE FUNCTION scrinalia.enqueue_runs(p_worker_names text[], p_requests jsonb[] DEFAULT NULL,
                                       p_trigger scrinalia.run_trigger DEFAULT 'MANUAL',
                                       p_requested_by text DEFAULT NULL)
RETURNS SETOF scrinalia.archive_worker_runs
LANGUAGE plpgsql SECURITY DEFINER
ROWS 1000
SET search_path = pg_catalog, scrinalia, pg_temp
SET jit = off
SET plan_cache_mode = force_custom_plan
SET work_mem = '64MB'
AS $$
DECLARE
    workers text[];
    requests jsonb[];
    at_i integer;      -- the element being checked, named by the error
    at_worker text;
    n_busy integer;
    busy text;
    r record;
    st text;
    msg text;
    hint text;
    detail text;
BEGIN
    IF p_trigger IS NULL OR p_trigger NOT IN ('MANUAL', 'CLI') THEN
        RAISE EXCEPTION USING ERRCODE = 'SW002',
            MESSAGE = format('enqueue_runs takes trigger MANUAL or CLI, not %s', coalesce(p_trigger::text, 'NULL')),
            HINT = 'SCHEDULE runs are created by the scheduler''s tick';
    END IF;
    IF p_worker_names IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SW002', MESSAGE = 'enqueue_runs takes an array of worker names, not NULL';
    END IF;
    IF p_requests IS NOT NULL THEN
        PERFORM scrinalia.check_array_lengths('SW002',
            format('enqueue_runs takes as many requests as worker names (or NULL: ''{}'' for each), not %s for %s',
                   cardinality(p_requests), cardinality(p_worker_names)),
            ARRAY[cardinality(p_worker_names), cardinality(p_requests)]);
    END IF;
    SELECT coalesce(array_agg(u.w ORDER BY u.i), '{}'), coalesce(array_agg(coalesce(u.q, '{}') ORDER BY u.i), '{}')
      INTO workers, requests
      FROM unnest(p_worker_names, p_requests) WITH ORDINALITY AS u(w, q, i);

    BEGIN
        SELECT d.i, format('worker %s is named twice (enqueues #%s and #%s)',
                           quote_literal(left(d.w, 100)), d.first_i, d.i)
          INTO at_i, msg
          FROM (SELECT s.i, s.w, min(s.i) OVER (PARTITION BY s.w) AS first_i
                  FROM unnest(workers) WITH ORDINALITY AS s(w, i) WHERE s.w IS NOT NULL) d
         WHERE d.i > d.first_i
         ORDER BY d.i
         LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'SW002', MESSAGE = msg;
        END IF;
        -- enqueue's order: the worker, its request, requested_by
        SELECT s.i, s.w INTO at_i, at_worker
          FROM unnest(workers) WITH ORDINALITY AS s(w, i)
         WHERE NOT EXISTS (SELECT FROM scrinalia.archive_workers aw WHERE aw.worker_name = s.w)
         ORDER BY s.i
         LIMIT 1;
        IF FOUND THEN
            PERFORM scrinalia.require_worker(at_worker);  -- raises its SW001
        END IF;
        -- An empty request is valid for every worker (validate_request returns it).
        -- validate_request's answer depends on the request and on the worker's
        -- engines, presets, options and configured engines alone (the name is only
        -- in its message): one call per distinct combination, its first element, in
        -- the order of those first elements, finds the first element refused.
        -- The catalogue read by key for each element (OFFSET 0: not joined to the
        -- whole catalogue by a hash or merge join sized for every element of the batch).
        FOR r IN SELECT g.i, workers[g.i] AS w, g.q
                   FROM (SELECT min(s.i)::integer AS i, s.q
                           FROM unnest(workers, requests) WITH ORDINALITY AS s(w, q, i)
                          CROSS JOIN LATERAL (SELECT aw.engines, aw.presets, aw.options,
                                                     aw.default_config -> 'engine' AS de
                                                FROM scrinalia.archive_workers aw
                                               WHERE aw.worker_name = s.w OFFSET 0) a
                           LEFT JOIN LATERAL (SELECT st.settings -> 'engine' AS se
                                                FROM scrinalia.archive_worker_settings st
                                               WHERE st.worker_name = s.w OFFSET 0) t ON true
                          WHERE s.q <> '{}'
                          GROUP BY s.q, a.engines, a.presets, a.options, a.de, t.se) g
                  ORDER BY g.i LOOP
            at_i := r.i;
            at_worker := r.w;
            PERFORM scrinalia.validate_request(r.w, r.q);
        END LOOP;
        at_i := NULL;
        PERFORM scrinalia.check_actor('requested_by', p_requested_by);
    EXCEPTION WHEN SQLSTATE 'SW001' OR SQLSTATE 'SW002' THEN
        GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, hint = PG_EXCEPTION_HINT;
        PERFORM scrinalia.raise_element_error('enqueue', at_i, at_worker, st, msg, hint);
    END;
    IF cardinality(workers) = 0 THEN
        RETURN;
    END IF;

    -- The slots, as enqueue takes them (see its comment), every worker's at once;
    -- first, so that the check below sees what a tick deciding them committed.
    PERFORM FROM scrinalia.archive_workers w
      WHERE w.worker_name = ANY (workers) ORDER BY w.worker_name FOR SHARE;
    PERFORM FROM scrinalia.archive_worker_schedules s
      WHERE s.worker_name = ANY (workers) ORDER BY s.worker_name FOR KEY SHARE;
    SELECT min(b.i), count(*), string_agg(quote_literal(b.w), ', ' ORDER BY b.i) FILTER (WHERE b.n <= 20)
      INTO at_i, n_busy, busy
      FROM (SELECT s.w, s.i, row_number() OVER (ORDER BY s.i) AS n
              FROM unnest(workers) WITH ORDINALITY AS s(w, i)
             WHERE EXISTS (SELECT FROM scrinalia.archive_worker_runs a
                            WHERE a.worker_name = s.w AND a.status IN ('QUEUED', 'RUNNING'))
                OR EXISTS (SELECT FROM scrinalia.archive_worker_runs p
                            WHERE p.worker_name = s.w AND p.retry_pending)) b;
    IF at_i IS NULL THEN
        -- The foreign-key check on the worker runs once per inserted row, and under this
        -- function's force_custom_plan it was planned anew for each (a tenth of the
        -- call): auto from here on, where it keeps its plan (a lookup by primary key);
        -- the insert itself, planned with the arrays' values, goes as a one-shot
        -- statement (a constant text, the values its parameters).
        PERFORM set_config('plan_cache_mode', 'auto', true);
        BEGIN
            RETURN QUERY EXECUTE
                'INSERT INTO scrinalia.archive_worker_runs AS n
                        (worker_name, trigger, request, config, config_sources, requested_by)
                 SELECT rc.worker_name, $3, rc.request, rc.config, rc.sources, $4
                   FROM scrinalia.resolve_configs($1, $2) rc
                  ORDER BY rc.worker_name
                 RETURNING n.*'
                USING workers, requests, p_trigger, p_requested_by;
        EXCEPTION WHEN unique_violation THEN
            -- a concurrent enqueue or tick took a slot after the check above: the key
            -- of the conflict names it (a worker name has no parenthesis), or else the
            -- first of the batch's workers now busy
            GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL;
            at_i := array_position(workers, substring(detail FROM '\(worker_name\)=\(([^()]*)\)'));
            IF at_i IS NULL THEN
                SELECT s.i INTO at_i FROM unnest(workers) WITH ORDINALITY AS s(w, i)
                 WHERE scrinalia.describe_slot_holder(s.w) IS NOT NULL ORDER BY s.i LIMIT 1;
            END IF;
            IF at_i IS NULL THEN  -- (and finished already)
                RAISE EXCEPTION USING ERRCODE = 'SW010',
                    MESSAGE = 'enqueue_runs: a concurrent enqueue or tick took the slot of one of these workers';
            END IF;
            n_busy := 1;
            busy := quote_literal(workers[at_i]);
        END;
    END IF;
    IF at_i IS NOT NULL THEN
        at_worker := workers[at_i];
        BEGIN
            PERFORM scrinalia.raise_slot_busy(at_worker,
                        coalesce(scrinalia.describe_slot_holder(at_worker), 'a concurrent run'));
        EXCEPTION WHEN SQLSTATE 'SW010' THEN
            GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT, hint = PG_EXCEPTION_HINT;
            RAISE EXCEPTION USING ERRCODE = 'SW010',
                MESSAGE = format('enqueue #%s (worker %s): %s', at_i, quote_literal(at_worker), msg), HINT = hint,
                DETAIL = format('busy: %s of the %s workers (%s%s)', n_busy, cardinality(workers), busy,
                                CASE WHEN n_busy > 20 THEN ', ...' ELSE '' END);
        END;
    END IF;
    PERFORM pg_notify('scrinalia_runs', w) FROM unnest(workers) AS w;
END $$;

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
RETURNS SETOF scrinalia.archive_worker_runs
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
            RETURNING r.*
        )
        SELECT * FROM u ORDER BY u.created_at, u.run_id;
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
            RETURNING r.*
        )
        SELECT * FROM u ORDER BY u.created_at, u.run_id;
    END IF;
END $$;

-- Claims the oldest claimable run: claim_runs() with a limit of one.
CREATE OR REPLACE FUNCTION scrinalia.claim_next(p_runner_id text, p_lease interval DEFAULT '5 minutes',
                                     p_workers text[] DEFAULT NULL)
RETURNS SETOF scrinalia.archive_worker_runs
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
BEGIN
    RETURN QUERY SELECT * FROM scrinalia.claim_runs(p_runner_id, p_lease, p_workers, 1);
END $$;

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
RETURNS scrinalia.archive_worker_runs
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
DECLARE
    lost text;
    run scrinalia.archive_worker_runs;
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
    SELECT * INTO run FROM scrinalia.archive_worker_runs r WHERE r.run_id = p_run_id;
    RETURN run;
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

-- Cancels a QUEUED run (a retry waiting in its backoff included) or a RUNNING one: it
-- is CANCELLED at once and frees the slot; CANCELLED is never retried. A RUNNING run's
-- lease is fenced: its runner's next heartbeat or finish writes nothing and answers
-- "the run is CANCELLED (cancelled by ...)" (lease_problem), which tells it to stop.
CREATE OR REPLACE FUNCTION scrinalia.cancel_run(p_run_id bigint, p_cancelled_by text DEFAULT NULL)
RETURNS scrinalia.archive_worker_runs
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
DECLARE
    run scrinalia.archive_worker_runs;
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
    RETURNING r.* INTO run;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'SW011',
            MESSAGE = format('run #%s cannot be cancelled: %s', p_run_id,
                coalesce((SELECT format('it is %s', status) FROM scrinalia.archive_worker_runs
                           WHERE run_id = p_run_id), 'no such run')),
            HINT = 'only a QUEUED or RUNNING run can be cancelled; a finished one has ended already';
    END IF;
    RETURN run;
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
RETURNS SETOF scrinalia.archive_worker_runs
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
    )
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
    RETURNING r.*;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n > 0 THEN
        PERFORM pg_notify('scrinalia_scheduler', 'reaped');
    END IF;
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
