-- The worker catalogue, persisted settings, request validation and config resolution.
-- Errors: SW001 unknown worker, SW002 invalid request or settings.

-- What is wrong with a worker name missing from the catalogue (SW001): the one home of
-- the message, which require_worker raises and the set-based calls raise naming the
-- element, with no exception block to catch it in.
CREATE OR REPLACE FUNCTION scrinalia.unknown_worker(p_worker_name text,
                                                   OUT code text, OUT message text, OUT hint text)
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    code := 'SW001';
    message := format('unknown worker %s', coalesce(quote_literal(left(p_worker_name, 100)), 'NULL'));
    hint := 'SELECT worker_name FROM scrinalia.worker_agenda lists the catalogue';
END $$;

CREATE OR REPLACE FUNCTION scrinalia.require_worker(p_worker_name text)
RETURNS scrinalia.archive_workers
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
DECLARE
    w scrinalia.archive_workers;
    p record;
BEGIN
    SELECT * INTO w FROM scrinalia.archive_workers WHERE worker_name = p_worker_name;
    IF NOT FOUND THEN
        p := scrinalia.unknown_worker(p_worker_name);
        PERFORM scrinalia.raise_problem(NULL, NULL, NULL, p.code, p.message, p.hint, NULL);
    END IF;
    RETURN w;
END $$;

-- Checks one value against an option spec {"type": ..., "values": [...]}; returns
-- NULL when it fits, else what is wrong with it.
CREATE OR REPLACE FUNCTION scrinalia.option_value_problem(p_spec jsonb, p_value jsonb)
RETURNS text
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t text := p_spec ->> 'type';
    got text := jsonb_typeof(p_value);
BEGIN
    IF t = 'integer' THEN
        IF got <> 'number' OR p_value::text !~ '^-?[0-9]+$' THEN
            RETURN format('must be an integer, got %s %s', got, left(p_value::text, 60));
        END IF;
        -- a handler reads it as a 64-bit integer: 1e400 is not one
        IF p_value::numeric NOT BETWEEN -9223372036854775808 AND 9223372036854775807 THEN
            RETURN format('must be an integer between -2^63 and 2^63-1, got %s digits', length(p_value::text));
        END IF;
    ELSIF t = 'number' THEN
        IF got <> 'number' THEN
            RETURN format('must be a number, got %s', got);
        END IF;
        -- and a number as a double: 1e400 would be infinity
        IF abs(p_value::numeric) > 1.7976931348623157e308 THEN
            RETURN format('must be a number a double precision can hold, got %s', left(p_value::text, 60));
        END IF;
    ELSIF t = 'string' THEN
        IF got <> 'string' THEN
            RETURN format('must be a string, got %s', got);
        END IF;
    ELSIF t = 'boolean' THEN
        IF got <> 'boolean' THEN
            RETURN format('must be a boolean, got %s', got);
        END IF;
    ELSE
        RETURN format('has an unusable catalogue type %s', coalesce(t, 'NULL'));
    END IF;
    IF p_spec ? 'values' AND NOT (p_spec -> 'values') @> jsonb_build_array(p_value) THEN
        RETURN format('must be one of %s, got %s', p_spec -> 'values', left(p_value::text, 60));
    END IF;
    RETURN NULL;
END $$;

-- What is wrong with a set of {name: value} against {name: spec} (SW002, naming the
-- part), or NULLs when nothing is.
CREATE OR REPLACE FUNCTION scrinalia.options_problem(p_worker_name text, p_part text, p_specs jsonb, p_values jsonb,
                                                    OUT message text, OUT hint text)
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    k text;
    v jsonb;
    problem text;
BEGIN
    IF jsonb_typeof(p_values) <> 'object' THEN
        message := format('invalid request for worker %L: %s must be an object, got %s',
                          p_worker_name, p_part, jsonb_typeof(p_values));
        RETURN;
    END IF;
    FOR k, v IN SELECT * FROM jsonb_each(p_values) LOOP
        IF NOT coalesce(p_specs, '{}') ? k THEN
            message := format('invalid request for worker %L: unknown %s key %L', p_worker_name, p_part, left(k, 100));
            hint := format('allowed: %s', coalesce((SELECT string_agg(x, ', ' ORDER BY x)
                                                      FROM jsonb_object_keys(coalesce(p_specs, '{}')) x), 'none'));
            RETURN;
        END IF;
        problem := scrinalia.option_value_problem(p_specs -> k, v);
        IF problem IS NOT NULL THEN
            message := format('invalid request for worker %L: %s.%s %s', p_worker_name, p_part, k, problem);
            RETURN;
        END IF;
    END LOOP;
END $$;

-- options_problem() raised. Nothing of this release calls it: the previous release's
-- validate_request does, and may be running in another session as a migrate commits
-- (a function dropped under it fails that call). The next release drops it.
CREATE OR REPLACE FUNCTION scrinalia.check_options(p_worker_name text, p_part text, p_specs jsonb, p_values jsonb)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE p record := scrinalia.options_problem(p_worker_name, p_part, p_specs, p_values);
BEGIN
    IF p.message IS NOT NULL THEN
        PERFORM scrinalia.raise_problem(NULL, NULL, NULL, 'SW002', p.message, p.hint, NULL);
    END IF;
END $$;

-- What is wrong with a WorkerRunRequest {engine?, preset?, options?, engine_options?}
-- checked against the catalogue: the SQLSTATE (SW001 unknown worker, SW002 invalid
-- request), message and hint of the first problem, or NULLs when it is valid. A NULL
-- request is '{}'. engine_options are checked against the engine the config will
-- resolve to when the request names none. Reads nothing of the worker but its engines,
-- presets, options and the engine of its settings and of its default config:
-- enqueue_runs checks once per distinct combination of those and the request, and must
-- group by anything else a check here comes to read. Returned, not raised: a batch
-- names its element in the error with no exception block (a subtransaction) per call.
CREATE OR REPLACE FUNCTION scrinalia.request_problem(p_worker_name text, p_request jsonb,
                                                    OUT code text, OUT message text, OUT hint text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
DECLARE
    w scrinalia.archive_workers;
    req jsonb := coalesce(p_request, '{}');
    k text;
    engine text;
    o record;
BEGIN
    SELECT * INTO w FROM scrinalia.archive_workers wk WHERE wk.worker_name = p_worker_name;
    IF NOT FOUND THEN
        SELECT u.code, u.message, u.hint INTO code, message, hint FROM scrinalia.unknown_worker(p_worker_name) u;
        RETURN;
    END IF;
    code := 'SW002';
    IF jsonb_typeof(req) <> 'object' THEN
        message := format('invalid request for worker %L: the request must be a JSON object, got %s',
                          p_worker_name, jsonb_typeof(req));
        RETURN;
    END IF;
    IF octet_length(req::text) > scrinalia.max_request_bytes() THEN
        message := format('invalid request for worker %L: the request is %s bytes, the limit is %s',
                          p_worker_name, octet_length(req::text), scrinalia.max_request_bytes());
        RETURN;
    END IF;
    FOR k IN SELECT jsonb_object_keys(req) LOOP
        IF k NOT IN ('engine', 'preset', 'options', 'engine_options') THEN
            message := format('invalid request for worker %L: unknown key %L', p_worker_name, left(k, 100));
            hint := 'a request has only engine, preset, options and engine_options';
            RETURN;
        END IF;
    END LOOP;
    FOREACH k IN ARRAY ARRAY['engine', 'preset'] LOOP
        IF req ? k AND jsonb_typeof(req -> k) <> 'string' THEN
            message := format('invalid request for worker %L: %s must be a string, got %s',
                              p_worker_name, k, jsonb_typeof(req -> k));
            RETURN;
        END IF;
    END LOOP;
    IF req ? 'engine' AND NOT w.engines ? (req ->> 'engine') THEN
        message := format('invalid request for worker %L: unknown engine %L', p_worker_name, left(req ->> 'engine', 100));
        hint := format('engines: %s', coalesce((SELECT string_agg(x, ', ' ORDER BY x) FROM jsonb_object_keys(w.engines) x), 'none'));
        RETURN;
    END IF;
    IF req ? 'preset' AND NOT w.presets ? (req ->> 'preset') THEN
        message := format('invalid request for worker %L: unknown preset %L', p_worker_name, left(req ->> 'preset', 100));
        hint := format('presets: %s', coalesce((SELECT string_agg(x, ', ' ORDER BY x) FROM jsonb_object_keys(w.presets) x), 'none'));
        RETURN;
    END IF;
    IF req ? 'options' THEN
        o := scrinalia.options_problem(p_worker_name, 'options', w.options, req -> 'options');
        IF o.message IS NOT NULL THEN
            message := o.message;
            hint := o.hint;
            RETURN;
        END IF;
    END IF;
    IF req ? 'engine_options' THEN
        engine := coalesce(req ->> 'engine',
                           (SELECT s.settings ->> 'engine' FROM scrinalia.archive_worker_settings s
                             WHERE s.worker_name = p_worker_name),
                           w.default_config ->> 'engine');
        IF engine IS NULL THEN
            message := format('invalid request for worker %L: engine_options given but no engine is named or configured',
                              p_worker_name);
            RETURN;
        END IF;
        o := scrinalia.options_problem(p_worker_name, format('engine_options (engine %s)', engine),
                                       w.engines -> engine -> 'engine_options', req -> 'engine_options');
        IF o.message IS NOT NULL THEN
            message := o.message;
            hint := o.hint;
            RETURN;
        END IF;
    END IF;
    code := NULL;
END $$;

-- request_problem() raised; returns the request ('{}' for NULL) when valid.
CREATE OR REPLACE FUNCTION scrinalia.validate_request(p_worker_name text, p_request jsonb)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
DECLARE p record := scrinalia.request_problem(p_worker_name, p_request);
BEGIN
    IF p.code IS NOT NULL THEN
        PERFORM scrinalia.raise_problem(NULL, NULL, NULL, p.code, p.message, p.hint, NULL);
    END IF;
    RETURN coalesce(p_request, '{}');
END $$;

-- explicit request > persisted settings > signature default, part by part; a preset
-- contributes its options between the settings and the request's own options. Never
-- raises: a pinned request that a later catalogue change made stale still resolves.
-- The one home of the rule: the config and its sources from the four layers' values
-- (signature default, settings, presets, request; NULL is '{}'). Assignments only,
-- each a simple expression with its plan kept for the session: an enqueue pays a few
-- microseconds where starting a query's executor cost more than the rest of it.
CREATE OR REPLACE FUNCTION scrinalia.config_of(d jsonb, s jsonb, presets jsonb, req jsonb,
                                               OUT config jsonb, OUT sources jsonb)
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    engine_src text;
    preset_src text;
    head jsonb;
    pv jsonb;                                 -- the chosen preset's values
    od jsonb; os jsonb; op jsonb; oq jsonb;   -- options of each layer
    ed jsonb; es jsonb; ep jsonb; eq jsonb;   -- engine_options of each layer
    src_o jsonb := '{}';
    src_e jsonb := '{}';
    k text;
BEGIN
    d := coalesce(d, '{}'); s := coalesce(s, '{}'); presets := coalesce(presets, '{}'); req := coalesce(req, '{}');
    -- engine and preset: the first layer that has the key gives it, as a whole
    engine_src := CASE WHEN req ? 'engine' THEN 'request' WHEN s ? 'engine' THEN 'settings'
                       WHEN d ? 'engine' THEN 'default' END;
    preset_src := CASE WHEN req ? 'preset' THEN 'request' WHEN s ? 'preset' THEN 'settings'
                       WHEN d ? 'preset' THEN 'default' END;
    head := CASE WHEN engine_src IS NULL THEN '{}'::jsonb
                 ELSE jsonb_build_object('engine', CASE engine_src WHEN 'request' THEN req
                                         WHEN 'settings' THEN s ELSE d END -> 'engine') END
            || CASE WHEN preset_src IS NULL THEN '{}'::jsonb
                    ELSE jsonb_build_object('preset', CASE preset_src WHEN 'request' THEN req
                                            WHEN 'settings' THEN s ELSE d END -> 'preset') END;
    -- options and engine_options, each merged key by key: default < settings < preset <
    -- request; a layer whose part is not an object contributes nothing
    pv := coalesce(presets -> (head ->> 'preset'), '{}');
    od := CASE WHEN jsonb_typeof(d -> 'options') = 'object' THEN d -> 'options' ELSE '{}' END;
    os := CASE WHEN jsonb_typeof(s -> 'options') = 'object' THEN s -> 'options' ELSE '{}' END;
    op := CASE WHEN jsonb_typeof(pv -> 'options') = 'object' THEN pv -> 'options' ELSE '{}' END;
    oq := CASE WHEN jsonb_typeof(req -> 'options') = 'object' THEN req -> 'options' ELSE '{}' END;
    ed := CASE WHEN jsonb_typeof(d -> 'engine_options') = 'object' THEN d -> 'engine_options' ELSE '{}' END;
    es := CASE WHEN jsonb_typeof(s -> 'engine_options') = 'object' THEN s -> 'engine_options' ELSE '{}' END;
    ep := CASE WHEN jsonb_typeof(pv -> 'engine_options') = 'object' THEN pv -> 'engine_options' ELSE '{}' END;
    eq := CASE WHEN jsonb_typeof(req -> 'engine_options') = 'object' THEN req -> 'engine_options' ELSE '{}' END;
    config := head || jsonb_build_object('options', od || os || op || oq, 'engine_options', ed || es || ep || eq);
    IF config -> 'options' <> '{}' THEN
        FOR k IN SELECT jsonb_object_keys(config -> 'options') LOOP
            src_o := src_o || jsonb_build_object(k, CASE WHEN oq ? k THEN 'request' WHEN op ? k THEN 'preset'
                                                         WHEN os ? k THEN 'settings' ELSE 'default' END);
        END LOOP;
    END IF;
    IF config -> 'engine_options' <> '{}' THEN
        FOR k IN SELECT jsonb_object_keys(config -> 'engine_options') LOOP
            src_e := src_e || jsonb_build_object(k, CASE WHEN eq ? k THEN 'request' WHEN ep ? k THEN 'preset'
                                                         WHEN es ? k THEN 'settings' ELSE 'default' END);
        END LOOP;
    END IF;
    sources := jsonb_strip_nulls(jsonb_build_object('engine', engine_src, 'preset', preset_src))
               || jsonb_build_object('options', src_o, 'engine_options', src_e);
END $$;

-- config_of() for many (worker, request) pairs at once (one row per distinct pair):
-- the tick, the retries and enqueue_runs resolve all their runs in one pass. The
-- result depends only on the four layers' values, so it is computed once per distinct
-- combination of them and shared. A worker missing from the catalogue resolves
-- against empty layers. PL/pgSQL with one generic plan, kept, for a few pairs; a
-- large batch (large_batch()) is planned with its arrays' values, hashing the catalogue
-- rather than probing it pair by pair. No plan has a join that a wrong size estimate
-- could make quadratic. No sort: the combinations are grouped by hashing their layers
-- (the generic plan's guess of a few pairs chose to sort them, comparing jsonb values,
-- which costs more).
CREATE OR REPLACE FUNCTION scrinalia.resolve_configs(p_workers text[], p_requests jsonb[])
RETURNS TABLE (worker_name text, request jsonb, config jsonb, sources jsonb)
LANGUAGE plpgsql STABLE
ROWS 1000
SET search_path = pg_catalog, scrinalia, pg_temp
SET jit = off
SET plan_cache_mode = force_generic_plan
SET enable_sort = off
AS $$
BEGIN
    IF cardinality(p_workers) >= scrinalia.large_batch() THEN
        -- (the SET clause above restores the mode at exit)
        PERFORM set_config('plan_cache_mode', 'force_custom_plan', true);
    END IF;
    RETURN QUERY
    WITH pairs AS (
        SELECT DISTINCT i.w, i.r FROM unnest(p_workers, p_requests) AS i(w, r)
    ), combos AS MATERIALIZED (
        SELECT coalesce(p.r, '{}') AS q, coalesce(wk.default_config, '{}') AS d,
               coalesce(st.settings, '{}') AS s, coalesce(wk.presets, '{}') AS presets,
               array_agg(p.w) AS ws, array_agg(p.r) AS rs
          FROM pairs p
          LEFT JOIN scrinalia.archive_workers wk ON wk.worker_name = p.w
          LEFT JOIN scrinalia.archive_worker_settings st ON st.worker_name = p.w
         GROUP BY 1, 2, 3, 4
    )
    -- back to the pairs without a join on the values: no plan can turn quadratic
    SELECT u.w, u.r, c.config, c.sources
      FROM combos x
     CROSS JOIN LATERAL scrinalia.config_of(x.d, x.s, x.presets, x.q) c
     CROSS JOIN LATERAL unnest(x.ws, x.rs) AS u(w, r);
END $$;

-- resolve_configs() for one pair.
CREATE OR REPLACE FUNCTION scrinalia.resolve_config(p_worker_name text, p_request jsonb,
                                         OUT config jsonb, OUT sources jsonb)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
BEGIN
    SELECT rc.config, rc.sources INTO config, sources
      FROM scrinalia.resolve_configs(ARRAY[p_worker_name], ARRAY[p_request]) rc;
END $$;

-- The identity of the rule resolve_configs() applies: the source of the functions that
-- resolve. A config kept for the tick (schedule_configs, migrations/0017) holds only
-- under the rule it was resolved by: a release that changes the rule uses none kept by
-- an earlier one, and one that leaves it as it was keeps them all.
CREATE OR REPLACE FUNCTION scrinalia.config_rule()
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT md5(string_agg(p.prosrc, ' ' ORDER BY p.proname))
      FROM pg_catalog.pg_proc p
     WHERE p.oid OPERATOR(pg_catalog.=) ANY (ARRAY['scrinalia.config_of(jsonb,jsonb,jsonb,jsonb)'::regprocedure,
                                                   'scrinalia.resolve_configs(text[],jsonb[])'::regprocedure])
$$;

-- A new layers_stamp (schedule_configs) for each worker whose config layers a statement
-- changed: its default_config or presets (archive_workers), its settings
-- (archive_worker_settings), or a worker new to the catalogue. The config kept for it,
-- resolved under the stamp before, no longer holds. A worker the statement removed has
-- no row left. One statement per statement, whatever its rows; never a wait on a tick
-- longer than its own transaction (the tick locks the rows it fills, then commits).
CREATE OR REPLACE FUNCTION scrinalia.config_stamp_statement()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
DECLARE
    changed text[];
BEGIN
    -- (each branch names only the transition tables its trigger has)
    IF TG_OP = 'INSERT' THEN
        changed := ARRAY(SELECT n.worker_name FROM new_rows n);
    ELSIF TG_TABLE_NAME = 'archive_workers' THEN
        changed := ARRAY(SELECT n.worker_name FROM new_rows n
                           LEFT JOIN old_rows o ON o.worker_name = n.worker_name
                          WHERE o.worker_name IS NULL OR o.default_config IS DISTINCT FROM n.default_config
                             OR o.presets IS DISTINCT FROM n.presets);
    ELSIF TG_OP = 'UPDATE' THEN
        changed := ARRAY(SELECT coalesce(n.worker_name, o.worker_name) FROM new_rows n
                           FULL JOIN old_rows o ON o.worker_name = n.worker_name
                          WHERE n.settings IS DISTINCT FROM o.settings);
    ELSE
        changed := ARRAY(SELECT o.worker_name FROM old_rows o);
    END IF;
    INSERT INTO scrinalia.schedule_configs AS k (worker_name, layers_stamp)
    SELECT w.worker_name, nextval('scrinalia.config_layers_stamp_seq')
      FROM scrinalia.archive_workers w
     WHERE w.worker_name = ANY (changed)
    ON CONFLICT (worker_name) DO UPDATE SET layers_stamp = excluded.layers_stamp;
    RETURN NULL;
END $$;

-- Settings truncated: every worker's layers changed.
CREATE OR REPLACE FUNCTION scrinalia.config_stamp_truncate_statement()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
BEGIN
    UPDATE scrinalia.schedule_configs SET layers_stamp = nextval('scrinalia.config_layers_stamp_seq');
    RETURN NULL;
END $$;

-- The stamps' triggers (a transition table serves one event only: a trigger per event),
-- and the row of every worker without one (loaded while the triggers were off, or
-- before this release).
DO $$
DECLARE
    t record;
BEGIN
    FOR t IN SELECT * FROM (VALUES
                 ('archive_workers', 'config_stamp_insert', 'INSERT', 'NEW TABLE AS new_rows'),
                 ('archive_workers', 'config_stamp_update', 'UPDATE', 'OLD TABLE AS old_rows NEW TABLE AS new_rows'),
                 ('archive_worker_settings', 'config_stamp_insert', 'INSERT', 'NEW TABLE AS new_rows'),
                 ('archive_worker_settings', 'config_stamp_update', 'UPDATE',
                  'OLD TABLE AS old_rows NEW TABLE AS new_rows'),
                 ('archive_worker_settings', 'config_stamp_delete', 'DELETE', 'OLD TABLE AS old_rows'))
                 AS x(tbl, name, event, tables)
    LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger
                        WHERE tgrelid = pg_catalog.to_regclass('scrinalia.' || t.tbl) AND tgname = t.name) THEN
            EXECUTE pg_catalog.format('CREATE TRIGGER %I AFTER %s ON scrinalia.%I REFERENCING %s '
                                      'FOR EACH STATEMENT EXECUTE FUNCTION scrinalia.config_stamp_statement()',
                                      t.name, t.event, t.tbl, t.tables);
        END IF;
    END LOOP;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger
                    WHERE tgrelid = 'scrinalia.archive_worker_settings'::pg_catalog.regclass
                      AND tgname = 'config_stamp_truncate') THEN
        CREATE TRIGGER config_stamp_truncate AFTER TRUNCATE ON scrinalia.archive_worker_settings
            FOR EACH STATEMENT EXECUTE FUNCTION scrinalia.config_stamp_truncate_statement();
    END IF;
    INSERT INTO scrinalia.schedule_configs (worker_name, layers_stamp)
    SELECT w.worker_name, nextval('scrinalia.config_layers_stamp_seq')
      FROM scrinalia.archive_workers w
     WHERE NOT EXISTS (SELECT FROM scrinalia.schedule_configs k WHERE k.worker_name = w.worker_name);
END
$$;

-- Registers or updates a worker in the catalogue (deploy-time: the owner only).
CREATE OR REPLACE FUNCTION scrinalia.register_worker(p_worker_name text, p_engines jsonb DEFAULT '{}',
                                          p_presets jsonb DEFAULT '{}', p_options jsonb DEFAULT '{}',
                                          p_default_config jsonb DEFAULT '{}', p_description text DEFAULT '')
RETURNS scrinalia.archive_workers
LANGUAGE plpgsql
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
DECLARE w scrinalia.archive_workers;
BEGIN
    IF p_worker_name IS NULL OR p_worker_name !~ '^[a-z][a-z0-9_.-]{0,62}$' THEN
        RAISE EXCEPTION USING ERRCODE = 'SW002',
            MESSAGE = format('invalid worker name %s', coalesce(quote_literal(left(p_worker_name, 100)), 'NULL')),
            HINT = 'a worker name is 1 to 63 characters: a lowercase letter, then lowercase letters, digits, _ . or -';
    END IF;
    INSERT INTO scrinalia.archive_workers AS a
           (worker_name, engines, presets, options, default_config, description)
    VALUES (p_worker_name, coalesce(p_engines, '{}'), coalesce(p_presets, '{}'),
            coalesce(p_options, '{}'), coalesce(p_default_config, '{}'), coalesce(p_description, ''))
    ON CONFLICT (worker_name) DO UPDATE
       SET engines = EXCLUDED.engines, presets = EXCLUDED.presets, options = EXCLUDED.options,
           default_config = EXCLUDED.default_config, description = EXCLUDED.description,
           updated_at = now()
    RETURNING * INTO w;
    RETURN w;
END $$;

-- Persisted settings: same shape as a request, validated the same way.
CREATE OR REPLACE FUNCTION scrinalia.put_settings(p_worker_name text, p_settings jsonb,
                                       p_updated_by text DEFAULT NULL, p_updated_by_user_id bigint DEFAULT NULL)
RETURNS scrinalia.archive_worker_settings
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
DECLARE st scrinalia.archive_worker_settings;
BEGIN
    PERFORM scrinalia.require_worker(p_worker_name);
    IF p_settings IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SW002',
            MESSAGE = format('settings for worker %L must be a JSON object, not NULL', p_worker_name),
            HINT = 'pass ''{}'' to clear the persisted settings';
    END IF;
    -- engine_options in settings are checked against the settings' own engine, if any
    PERFORM scrinalia.validate_request(p_worker_name, p_settings);
    INSERT INTO scrinalia.archive_worker_settings AS a
           (worker_name, settings, updated_by, updated_by_user_id, updated_at)
    VALUES (p_worker_name, p_settings, scrinalia.check_actor('updated_by', p_updated_by),
            p_updated_by_user_id, now())
    ON CONFLICT (worker_name) DO UPDATE
       SET settings = EXCLUDED.settings, updated_by = EXCLUDED.updated_by,
           updated_by_user_id = EXCLUDED.updated_by_user_id, updated_at = now()
    RETURNING * INTO st;
    RETURN st;
END $$;

-- The names of `p_names` that are no registered worker ('*' is no name): what a runner
-- warns about at start-up, a handler for a worker nobody registered (a typo, most often).
CREATE OR REPLACE FUNCTION scrinalia.unregistered_workers(p_names text[])
RETURNS text[]
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
    SELECT coalesce(array_agg(n ORDER BY n), '{}')
      FROM unnest(p_names) AS u(n)
     WHERE n IS DISTINCT FROM '*'
       AND NOT EXISTS (SELECT 1 FROM scrinalia.archive_workers w WHERE w.worker_name = n)
$$;

-- A worker's maximum run time: its own (archive_worker_limits), else the policy's
-- default_max_run_time().
CREATE OR REPLACE FUNCTION scrinalia.max_run_time_of(p_worker_name text)
RETURNS interval
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
BEGIN
    RETURN coalesce((SELECT l.max_run_time FROM scrinalia.archive_worker_limits l WHERE l.worker_name = p_worker_name),
                    scrinalia.default_max_run_time());
END $$;

-- Sets a worker's maximum run time (the owner only, as register_worker); NULL returns
-- it to the default. Between shortest_max_run_time() and longest_max_run_time(), else
-- SW002. It applies at once, to the worker's RUNNING run too (counted from its start).
-- Returns the limit now in force.
CREATE OR REPLACE FUNCTION scrinalia.set_max_run_time(p_worker_name text, p_max_run_time interval)
RETURNS interval
LANGUAGE plpgsql
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
BEGIN
    PERFORM scrinalia.require_worker(p_worker_name);
    IF p_max_run_time < scrinalia.shortest_max_run_time() OR p_max_run_time > scrinalia.longest_max_run_time() THEN
        RAISE EXCEPTION USING ERRCODE = 'SW002',
            MESSAGE = format('invalid maximum run time %s for worker %L: between %s and %s',
                             p_max_run_time, p_worker_name, scrinalia.shortest_max_run_time(),
                             scrinalia.longest_max_run_time()),
            HINT = 'NULL returns the worker to the default';
    END IF;
    IF p_max_run_time IS NULL THEN
        DELETE FROM scrinalia.archive_worker_limits WHERE worker_name = p_worker_name;
    ELSE
        INSERT INTO scrinalia.archive_worker_limits (worker_name, max_run_time) VALUES (p_worker_name, p_max_run_time)
        ON CONFLICT (worker_name) DO UPDATE SET max_run_time = EXCLUDED.max_run_time, updated_at = now();
    END IF;
    RETURN scrinalia.max_run_time_of(p_worker_name);
END $$;
