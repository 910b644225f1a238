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

-- What a busy slot is refused with (SW010), its holder as describe_slot_holder says.
CREATE OR REPLACE FUNCTION scrinalia.slot_busy(p_worker_name text, p_holder text,
                                               OUT code text, OUT message text, OUT hint text)
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    code := 'SW010';
    message := format('worker %L is busy: %s', p_worker_name, p_holder);
    hint := 'one run per worker at a time: wait for it to finish, or cancel it (a queued or running run, a retry waiting for its moment too)';
END $$;

-- slot_busy() raised. Nothing of this release calls it: the previous release's enqueue
-- does, and may be running in another session as a migrate commits (a function dropped
-- under it fails that call). The next release drops it.
CREATE OR REPLACE FUNCTION scrinalia.raise_slot_busy(p_worker_name text, p_holder text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE p record := scrinalia.slot_busy(p_worker_name, p_holder);
BEGIN
    PERFORM scrinalia.raise_problem(NULL, NULL, NULL, p.code, p.message, p.hint, NULL);
END $$;

-- Enqueue's one home: one run for each (worker, request) pair, all or nothing, which
-- enqueue() calls with one pair and enqueue_runs() with its arrays (p_call: which of the
-- two, for its messages). p_requests NULL: '{}' for every worker; else one per worker
-- (a NULL element is '{}', as enqueue's NULL request). The checks, in this order: the
-- trigger, the shape (the arrays, a worker named twice: which of its requests would be
-- meant?), the catalogue, the request (once per distinct request and what it is checked
-- against), requested_by, the slot and the owed retry. The first element failing the
-- first failing check is reported with enqueue's error; enqueue_runs prefixes it
-- "enqueue #N (worker 'x'): ", N counting from 1, and a busy slot's DETAIL names the
-- batch's other busy workers. Returns the new runs in worker order (their run_id
-- order), and sends one NOTIFY per run. Not granted: callers go through enqueue() and
-- enqueue_runs().
-- No exception block on the way of any call: each check returns its problem, raised
-- once the element is known (in a long transaction of enqueues, each call's
-- subtransaction stayed locked until its end and overflowed the session's
-- subtransaction cache, making every call, and every other session's snapshot check,
-- cost more than the one before).
-- The slots: catalogue rows FOR SHARE (create_retries skips a worker so held), schedule
-- rows FOR KEY SHARE (the tick's FOR UPDATE ... SKIP LOCKED skips it), both in worker
-- order so that two batches sharing workers cannot deadlock, and before the insert
-- checks the slot, so that it sees what a tick deciding them committed. A transaction
-- left open after an enqueue then holds back that one worker's period and retry,
-- decided once it ends, instead of the tick waiting on the one-slot index entry of an
-- insert not yet committed (a unique check waits for the inserter; the wait would cost
-- every worker of the tick's chunk). Neither lock stops a foreign-key check (KEY SHARE)
-- or put_schedule's update (NO KEY UPDATE).
-- Plans: each statement keeps one generic plan for the session (a call of one run pays
-- no planning), made with seqscans off: made while the statistics said the ledger was
-- empty, a scan of the whole ledger would make each call of a long transaction slower
-- than the last as its runs accumulate. A large batch is planned with its arrays'
-- values instead (a generic plan guesses ten elements).
CREATE OR REPLACE FUNCTION scrinalia.enqueue_batch(p_call text, p_worker_names text[], p_requests jsonb[],
                                                   p_trigger scrinalia.run_trigger, p_requested_by text)
RETURNS scrinalia.worker_run_v1[]
LANGUAGE plpgsql
SET search_path = pg_catalog, scrinalia, pg_temp
SET jit = off
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
DECLARE
    named boolean := p_call = 'enqueue_runs';  -- errors name the element
    workers text[];
    requests jsonb[];
    n_workers integer;
    layers record;     -- the one worker's config layers, as its catalogue row was locked
    configs jsonb[];   -- each worker's config and its sources, in worker order
    sources jsonb[];
    at_i integer;      -- the element failing a check
    at_worker text;
    n_busy integer;
    busy text;
    r record;
    p record;          -- a problem: code, message, hint
    inserted scrinalia.worker_run_v1[];
BEGIN
    IF p_trigger IS NULL OR p_trigger NOT IN ('MANUAL', 'CLI') THEN
        RAISE EXCEPTION USING ERRCODE = 'SW002',
            MESSAGE = format('%s takes trigger MANUAL or CLI, not %s', p_call, coalesce(p_trigger::text, 'NULL')),
            HINT = 'SCHEDULE runs are created by the scheduler''s tick';
    END IF;
    IF p_worker_names IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SW002', MESSAGE = format('%s takes an array of worker names, not NULL', p_call);
    END IF;
    IF p_requests IS NOT NULL THEN
        PERFORM scrinalia.check_array_lengths('SW002',
            format('%s takes as many requests as worker names (or NULL: ''{}'' for each), not %s for %s',
                   p_call, cardinality(p_requests), cardinality(p_worker_names)),
            ARRAY[cardinality(p_worker_names), cardinality(p_requests)]);
    END IF;
    n_workers := cardinality(p_worker_names);
    IF n_workers >= scrinalia.large_batch() THEN
        PERFORM set_config('plan_cache_mode', 'force_custom_plan', true),
                set_config('enable_seqscan', 'on', true),
                set_config('work_mem', '64MB', true);  -- a hash of every element stays in memory
    END IF;
    -- the arrays as 1-based lists (an array of any shape is taken element by element)
    IF array_ndims(p_worker_names) = 1 AND array_lower(p_worker_names, 1) = 1
       AND (p_requests IS NULL OR (array_ndims(p_requests) = 1 AND array_lower(p_requests, 1) = 1)) THEN
        workers := p_worker_names;
        requests := array_replace(coalesce(p_requests, array_fill('{}'::jsonb, ARRAY[n_workers])), NULL, '{}');
    ELSE
        SELECT coalesce(array_agg(u.w ORDER BY u.i), '{}'), coalesce(array_agg(coalesce(u.q, '{}') ORDER BY u.i), '{}')
          INTO workers, requests
          FROM unnest(p_worker_names, p_requests) WITH ORDINALITY AS u(w, q, i);
    END IF;

    IF n_workers > 1 THEN
        SELECT d.i::integer AS i, format('worker %s is named twice (enqueues #%s and #%s)',
                                         quote_literal(left(d.w, 100)), d.first_i, d.i) AS message
          INTO p
          FROM (SELECT s.i, s.w, min(s.i) OVER (PARTITION BY s.w) AS first_i
                  FROM unnest(workers) WITH ORDINALITY AS s(w, i) WHERE s.w IS NOT NULL) d
         WHERE d.i > d.first_i
         ORDER BY d.i
         LIMIT 1;
        IF FOUND THEN
            PERFORM scrinalia.raise_problem('enqueue', p.i, NULL, 'SW002', p.message, NULL, NULL);
        END IF;
    END IF;
    -- The catalogue rows, locked (the workers are distinct: one row each, or the worker
    -- is unknown); a lone worker's config layers read with its row (a batch's are read
    -- by resolve_configs below, not gathered here).
    SELECT count(*) AS locked, (array_agg(l.d) FILTER (WHERE n_workers = 1))[1] AS d,
           (array_agg(l.s) FILTER (WHERE n_workers = 1))[1] AS s,
           (array_agg(l.presets) FILTER (WHERE n_workers = 1))[1] AS presets
      INTO layers
      FROM (SELECT wk.default_config AS d, st.settings AS s, wk.presets
              FROM scrinalia.archive_workers wk
              -- (by key, OFFSET 0: a join would scan all the settings)
              LEFT JOIN LATERAL (SELECT ws.settings FROM scrinalia.archive_worker_settings ws
                                  WHERE ws.worker_name = wk.worker_name OFFSET 0) st ON true
             WHERE wk.worker_name = ANY (workers)
             ORDER BY wk.worker_name
               FOR SHARE OF wk) l;
    IF layers.locked < n_workers THEN
        -- each element looked up by key (OFFSET 0: not joined to the whole catalogue by
        -- a hash or merge join sized for every element of the batch)
        SELECT s.i, s.w INTO at_i, at_worker
          FROM unnest(workers) WITH ORDINALITY AS s(w, i)
         WHERE NOT EXISTS (SELECT FROM scrinalia.archive_workers aw WHERE aw.worker_name = s.w OFFSET 0)
         ORDER BY s.i
         LIMIT 1;
        p := scrinalia.unknown_worker(at_worker);
        PERFORM scrinalia.raise_problem('enqueue', CASE WHEN named THEN at_i END, at_worker,
                                        p.code, p.message, p.hint, NULL);
    END IF;
    -- An empty request is valid for every worker. request_problem's answer depends on
    -- the request and on the worker's engines, presets, options and configured engines
    -- alone (the name is only in its message): one check per distinct combination, its
    -- first element, in the order of those first elements, finds the first element
    -- refused (one element: checked as it is).
    IF n_workers = 1 AND requests[1] <> '{}' THEN
        p := scrinalia.request_problem(workers[1], requests[1]);
        IF p.code IS NOT NULL THEN
            PERFORM scrinalia.raise_problem('enqueue', CASE WHEN named THEN 1 END, workers[1],
                                            p.code, p.message, p.hint, NULL);
        END IF;
    ELSIF cardinality(array_remove(requests, '{}')) > 0 THEN
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
            p := scrinalia.request_problem(r.w, r.q);
            IF p.code IS NOT NULL THEN
                PERFORM scrinalia.raise_problem('enqueue', CASE WHEN named THEN r.i END, r.w,
                                                p.code, p.message, p.hint, NULL);
            END IF;
        END LOOP;
    END IF;
    IF length(p_requested_by) > scrinalia.max_actor_length() THEN  -- (a call costs more than the test)
        PERFORM scrinalia.check_actor('requested_by', p_requested_by);  -- raises its SW002
    END IF;
    IF n_workers = 0 THEN
        RETURN '{}';
    END IF;

    PERFORM FROM scrinalia.archive_worker_schedules s
      WHERE s.worker_name = ANY (workers) ORDER BY s.worker_name FOR KEY SHARE;
    -- The configs: config_of() of the one worker's layers (no query), or resolve_configs()
    -- once for the batch (once per distinct combination of layers and request).
    IF n_workers = 1 THEN
        r := scrinalia.config_of(layers.d, layers.s, layers.presets, requests[1]);
        configs := ARRAY[r.config];
        sources := ARRAY[r.sources];
    ELSE
        SELECT array_agg(rc.config ORDER BY s.i), array_agg(rc.sources ORDER BY s.i)
          INTO configs, sources
          FROM unnest(workers) WITH ORDINALITY AS s(w, i)
          JOIN scrinalia.resolve_configs(workers, requests) rc ON rc.worker_name = s.w;
        -- The insert keeps one plan, made with seqscans off (see above), and so does the
        -- foreign-key check on the worker, once per inserted row: a plan per row costs
        -- more than the row, whatever the batch's size.
        PERFORM set_config('plan_cache_mode', 'force_generic_plan', true),
                set_config('enable_seqscan', 'off', true);
    END IF;
    -- The slot is free when the worker has no QUEUED/RUNNING run (the one-slot index
    -- answers) and no owed retry (the insert looks it up): no row inserted for a worker
    -- means it is busy. Under READ COMMITTED the one-slot index's conflict is answered
    -- by DO NOTHING, with no subtransaction (the insert waits for an uncommitted run).
    -- Under REPEATABLE READ or SERIALIZABLE, DO NOTHING would raise a serialization
    -- failure for a run its snapshot cannot see: the exception block there.
    IF current_setting('transaction_isolation') = 'read committed' THEN
        WITH n AS (
            INSERT INTO scrinalia.archive_worker_runs AS n
                   (worker_name, trigger, request, config, config_sources, requested_by)
            SELECT u.w, p_trigger, u.q, u.c, u.s, p_requested_by
              FROM unnest(workers, requests, configs, sources) AS u(w, q, c, s)
             WHERE NOT EXISTS (SELECT FROM scrinalia.archive_worker_runs o
                                WHERE o.worker_name = u.w AND o.retry_pending)
              ORDER BY u.w
            ON CONFLICT (worker_name) WHERE status IN ('QUEUED', 'RUNNING') DO NOTHING
            RETURNING scrinalia.run_v1(n) AS run)
        SELECT coalesce(array_agg(n.run ORDER BY (n.run).run_id), '{}') INTO inserted FROM n;
    ELSE
        BEGIN
            WITH n AS (
                INSERT INTO scrinalia.archive_worker_runs AS n
                       (worker_name, trigger, request, config, config_sources, requested_by)
                SELECT u.w, p_trigger, u.q, u.c, u.s, p_requested_by
                  FROM unnest(workers, requests, configs, sources) AS u(w, q, c, s)
                 WHERE NOT EXISTS (SELECT FROM scrinalia.archive_worker_runs o
                                    WHERE o.worker_name = u.w AND o.retry_pending)
                  ORDER BY u.w
                RETURNING scrinalia.run_v1(n) AS run)
            SELECT coalesce(array_agg(n.run ORDER BY (n.run).run_id), '{}') INTO inserted FROM n;
        EXCEPTION WHEN unique_violation THEN
            -- Which slot: a run visible to this snapshot, else one that committed after
            -- it. Each worker's insert is tried alone, in order, and undone; the first
            -- that conflicts is the busy one (a rare path: a subtransaction per worker,
            -- never an error text read).
            SELECT min(s.i) INTO at_i
              FROM unnest(workers) WITH ORDINALITY AS s(w, i)
             WHERE EXISTS (SELECT FROM scrinalia.archive_worker_runs a
                            WHERE a.worker_name = s.w AND a.status IN ('QUEUED', 'RUNNING'));
            FOR i IN 1 .. n_workers LOOP
                EXIT WHEN at_i IS NOT NULL;
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
            END LOOP;
            IF at_i IS NULL THEN  -- (finished already)
                RAISE EXCEPTION USING ERRCODE = 'SW010',
                    MESSAGE = format('%s: a concurrent enqueue or tick took the slot of one of these workers', p_call);
            END IF;
            inserted := NULL;
        END;
    END IF;
    IF cardinality(inserted) = n_workers THEN
        PERFORM pg_notify('scrinalia_runs', w) FROM unnest(workers) AS w;
        RETURN inserted;
    END IF;
    -- Busy: the workers without a new run (the first of them named), or the one the
    -- probe found.
    IF inserted IS NOT NULL THEN
        SELECT min(s.i), count(*), array_to_string((array_agg(quote_literal(s.w) ORDER BY s.i))[1:20], ', ')
          INTO at_i, n_busy, busy
          FROM unnest(workers) WITH ORDINALITY AS s(w, i)
         WHERE s.w NOT IN (SELECT ins.worker_name FROM unnest(inserted) AS ins);
    ELSE
        n_busy := 1;
        busy := quote_literal(workers[at_i]);
    END IF;
    at_worker := workers[at_i];
    p := scrinalia.slot_busy(at_worker, coalesce(scrinalia.describe_slot_holder(at_worker), 'a concurrent run'));
    PERFORM scrinalia.raise_problem('enqueue', CASE WHEN named THEN at_i END, at_worker, p.code, p.message, p.hint,
                                    CASE WHEN named THEN format('busy: %s of the %s workers (%s%s)', n_busy,
                                             n_workers, busy, CASE WHEN n_busy > 20 THEN ', ...' ELSE '' END) END);
END $$;

-- Enqueues one run (enqueue_batch() of one pair): the run, or SW010 naming the slot's
-- holder.
CREATE OR REPLACE FUNCTION scrinalia.enqueue(p_worker_name text, p_request jsonb DEFAULT '{}',
                                  p_trigger scrinalia.run_trigger DEFAULT 'MANUAL',
                                  p_requested_by text DEFAULT NULL)
RETURNS scrinalia.worker_run_v1
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
BEGIN
    RETURN (scrinalia.enqueue_batch('enqueue', ARRAY[p_worker_name], ARRAY[p_request], p_trigger, p_requested_by))[1];
END $$;

-- The set-based enqueue (enqueue_batch() of the arrays): the new runs in worker order,
-- or the error of the first element refused, numbered.
CREATE OR REPLACE FUNCTION scrinalia.enqueue_runs(p_worker_names text[], p_requests jsonb[] DEFAULT NULL,
                                       p_trigger scrinalia.run_trigger DEFAULT 'MANUAL',
                                       p_requested_by text DEFAULT NULL)
RETURNS SETOF scrinalia.worker_run_v1
LANGUAGE plpgsql SECURITY DEFINER
ROWS 1000
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
BEGIN
    RETURN QUERY
    SELECT * FROM unnest(scrinalia.enqueue_batch('enqueue_runs', p_worker_names, p_requests, p_trigger,
                                                 p_requested_by));
END $$;
