-- Enqueue into the one slot: a run, or a batch of them, all or nothing.
-- Errors: SW010 slot busy (an API answers 409); SW001 and SW002 from the catalogue's checks.
-- Channel: scrinalia_runs (a run may be claimable).

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
RETURNS scrinalia.worker_run_v1
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
    made record;        -- the new run, as the functions return it (run_v1), or none
    run scrinalia.worker_run_v1;
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
        RETURNING scrinalia.run_v1(archive_worker_runs) AS run INTO made;
        run := made.run;
    ELSE
        BEGIN
            INSERT INTO scrinalia.archive_worker_runs
                   (worker_name, trigger, request, config, config_sources, requested_by)
            SELECT p_worker_name, p_trigger, req, resolved.config, resolved.sources, p_requested_by
             WHERE NOT EXISTS (SELECT FROM scrinalia.archive_worker_runs o
                                WHERE o.worker_name = p_worker_name AND o.retry_pending)
            RETURNING scrinalia.run_v1(archive_worker_runs) AS run INTO made;
            run := made.run;
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
RETURNS SETOF scrinalia.worker_run_v1
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
    inserted scrinalia.worker_run_v1[];
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
        -- A concurrent enqueue or tick may take a slot after the check above. Under
        -- READ COMMITTED the one-slot index's conflict is answered by DO NOTHING (no
        -- subtransaction, as in enqueue): the workers whose run is missing from what
        -- the insert returned are the busy ones, the first of them named. Under
        -- REPEATABLE READ or SERIALIZABLE, DO NOTHING would raise a serialization
        -- failure for a run its snapshot cannot see: the exception block there.
        IF current_setting('transaction_isolation') = 'read committed' THEN
            EXECUTE
                'WITH n AS (
                    INSERT INTO scrinalia.archive_worker_runs AS n
                           (worker_name, trigger, request, config, config_sources, requested_by)
                    SELECT rc.worker_name, $3, rc.request, rc.config, rc.sources, $4
                      FROM scrinalia.resolve_configs($1, $2) rc
                     ORDER BY rc.worker_name
                    ON CONFLICT (worker_name) WHERE status IN (''QUEUED'', ''RUNNING'') DO NOTHING
                    RETURNING scrinalia.run_v1(n) AS run)
                 SELECT coalesce(array_agg(n.run ORDER BY (n.run).run_id), ''{}'') FROM n'
                INTO inserted
                USING workers, requests, p_trigger, p_requested_by;
            IF cardinality(inserted) = cardinality(workers) THEN
                RETURN QUERY SELECT * FROM unnest(inserted);
            ELSE
                SELECT min(s.i), count(*), array_to_string((array_agg(quote_literal(s.w) ORDER BY s.i))[1:20], ', ')
                  INTO at_i, n_busy, busy
                  FROM unnest(workers) WITH ORDINALITY AS s(w, i)
                 WHERE s.w NOT IN (SELECT ins.worker_name FROM unnest(inserted) AS ins);
            END IF;
        ELSE
            BEGIN
                RETURN QUERY EXECUTE
                    'WITH i AS (
                        INSERT INTO scrinalia.archive_worker_runs AS n
                               (worker_name, trigger, request, config, config_sources, requested_by)
                        SELECT rc.worker_name, $3, rc.request, rc.config, rc.sources, $4
                          FROM scrinalia.resolve_configs($1, $2) rc
                         ORDER BY rc.worker_name
                        RETURNING scrinalia.run_v1(n) AS run)
                     SELECT (i.run).* FROM i'
                    USING workers, requests, p_trigger, p_requested_by;
            EXCEPTION WHEN unique_violation THEN
                -- Which slot: the run that took it committed after this snapshot, which
                -- cannot see it. Each worker's insert is tried alone, in order, and
                -- undone; the first that conflicts is the busy one (a rare path: a
                -- subtransaction per worker, never an error text read).
                FOR i IN 1 .. cardinality(workers) LOOP
                    BEGIN
                        INSERT INTO scrinalia.archive_worker_runs (worker_name, trigger)
                        VALUES (workers[i], p_trigger);
                        RAISE EXCEPTION USING ERRCODE = 'SW099';  -- (undoes the probe)
                    EXCEPTION
                        WHEN unique_violation THEN
                            at_i := i;
                        WHEN SQLSTATE 'SW099' THEN
                            NULL;
                    END;
                    EXIT WHEN at_i IS NOT NULL;
                END LOOP;
                IF at_i IS NULL THEN  -- (finished already)
                    RAISE EXCEPTION USING ERRCODE = 'SW010',
                        MESSAGE = 'enqueue_runs: a concurrent enqueue or tick took the slot of one of these workers';
                END IF;
                n_busy := 1;
                busy := quote_literal(workers[at_i]);
            END;
        END IF;
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
