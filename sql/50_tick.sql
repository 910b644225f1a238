-- The scheduler's tick: the due query, enqueue-or-skip + advance, retries, and when
-- to wake up next. The shim computes next occurrences (cron in a zone, DST) between
-- due_schedules() and tick(), in the same transaction, so the rows stay locked.
-- Errors: SW030 bad tick input; SW032 the caller is not the scheduler (check_scheduler_caller,
-- 45_scheduler_lock.sql: the first statement of each function that decides).

-- Enabled schedules that are due (next_run_at <= now()) or not armed yet (NULL, or a
-- value outside period_start()..period_end(), 'infinity' included, which no cron
-- produces: re-armed; its next_run_at is returned NULL), row-locked for the caller's
-- transaction; those another transaction holds are skipped, and so are those set
-- aside for an error until their retry time. No JIT, and 100,000 rows sorted in memory.
-- The three kinds in that order, each read as a range of an index of its own (the
-- unarmed ones, ix_worker_schedules_unarmed; the due and those beyond the periods'
-- range, the two ends of ix_worker_schedules_due_order), the later ones up to what
-- the limit leaves: one query with the three ORs is no range of any index, and its
-- plan walked the whole due-order index through a filter, every schedule read at
-- every pass, whenever the statistics were taken while many were due (or a session's
-- sixth call kept a generic plan). Planned at each call with its limit and now().
CREATE OR REPLACE FUNCTION scrinalia.due_schedules(p_limit integer DEFAULT 100000)
RETURNS TABLE (worker_name text, cron text, timezone text, next_run_at timestamptz, db_now timestamptz)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
SET jit = off
SET work_mem = '64MB'
SET plan_cache_mode = force_custom_plan
-- (statistics taken while every schedule was due make a scan of them all look cheapest)
SET enable_seqscan = off
AS $$
DECLARE
    got bigint := 0;
    n bigint;
BEGIN
    PERFORM scrinalia.check_scheduler_caller('due_schedules');
    IF p_limit IS NULL OR p_limit < 1 THEN
        RAISE EXCEPTION USING ERRCODE = 'SW030',
            MESSAGE = format('due_schedules takes a limit of at least 1, not %s', coalesce(p_limit::text, 'NULL'));
    END IF;
    RETURN QUERY
    SELECT s.worker_name, s.cron, s.timezone, NULL::timestamptz, now()
      FROM scrinalia.archive_worker_schedules s
     WHERE s.enabled AND s.next_run_at IS NULL
       AND (s.arm_retry_at IS NULL OR s.arm_retry_at <= now())
     ORDER BY s.worker_name
     LIMIT p_limit
       FOR UPDATE OF s SKIP LOCKED;
    GET DIAGNOSTICS n = ROW_COUNT;
    got := got + n;
    -- (NULLS FIRST, though none is NULL here: the order of ix_worker_schedules_due_order,
    -- read as far as the limit; any other is every due row found and sorted, for each
    -- chunk of the pass)
    IF got < p_limit THEN
        RETURN QUERY
        SELECT s.worker_name, s.cron, s.timezone,
               CASE WHEN s.next_run_at >= scrinalia.period_start() THEN s.next_run_at END, now()
          FROM scrinalia.archive_worker_schedules s
         WHERE s.enabled AND s.next_run_at <= now()
           AND (s.arm_retry_at IS NULL OR s.arm_retry_at <= now())
         ORDER BY s.next_run_at NULLS FIRST, s.worker_name
         LIMIT p_limit - got
           FOR UPDATE OF s SKIP LOCKED;
        GET DIAGNOSTICS n = ROW_COUNT;
        got := got + n;
    END IF;
    IF got < p_limit THEN
        RETURN QUERY
        SELECT s.worker_name, s.cron, s.timezone, NULL::timestamptz, now()
          FROM scrinalia.archive_worker_schedules s
         WHERE s.enabled AND s.next_run_at >= scrinalia.period_end()
           AND (s.arm_retry_at IS NULL OR s.arm_retry_at <= now())
         ORDER BY s.next_run_at NULLS FIRST, s.worker_name
         LIMIT p_limit - got
           FOR UPDATE OF s SKIP LOCKED;
    END IF;
END $$;

-- Sets aside the schedules whose next occurrence the shim could not compute (a zone
-- its tzdata lacks, a cron it refuses): the error is kept on the schedule, where the
-- agenda and scheduler_health() show it, and the schedule is tried again only after
-- arm_retry_interval(), so that it neither spins the scheduler nor blocks the others.
-- Call it in the tick's transaction (the rows are locked by due_schedules()).
CREATE OR REPLACE FUNCTION scrinalia.set_schedules_aside(p_workers text[], p_errors text[])
RETURNS TABLE (worker_name text, arm_error text, arm_error_since timestamptz, arm_retry_at timestamptz)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
BEGIN
    PERFORM scrinalia.check_scheduler_caller('set_schedules_aside');
    PERFORM scrinalia.check_array_lengths(
        'SW030', 'set_schedules_aside takes two arrays of the same length: worker names and errors',
        ARRAY[cardinality(p_workers), cardinality(p_errors)]);
    RETURN QUERY
    UPDATE scrinalia.archive_worker_schedules s
       SET arm_error = left(coalesce(i.err, 'the scheduler could not compute the next occurrence'),
                            scrinalia.max_arm_error_length()),
           arm_error_since = coalesce(s.arm_error_since, now()),
           arm_retry_at = now() + scrinalia.arm_retry_interval()
      FROM unnest(p_workers, p_errors) AS i(w, err)
     WHERE s.worker_name = i.w AND s.enabled
    RETURNING s.worker_name, s.arm_error, s.arm_error_since, s.arm_retry_at;
END $$;

-- Whether PostgreSQL can load the zone (a zone the shim knows and this server's tzdata
-- lacks must not fail the whole tick: its schedules are refused, the others go on).
CREATE OR REPLACE FUNCTION scrinalia.zone_loads(p_zone text)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM timezone(p_zone, now());
    RETURN true;
EXCEPTION WHEN invalid_parameter_value OR feature_not_supported THEN
    RETURN false;
END $$;

-- Why the tick refuses p_at as the next instant of (p_cron, p_zone), or NULL when
-- cron_fires_at() says it fires (the slow check, for what the masks do not accept).
CREATE OR REPLACE FUNCTION scrinalia.tick_instant_refusal(p_cron text, p_zone text, p_at timestamptz)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF scrinalia.cron_fires_at(p_cron, p_zone, p_at) THEN
        RETURN NULL;
    END IF;
    RETURN format('the tick refused %s as the next instant: "%s" does not fire then in %s',
                  timezone('UTC', p_at) || ' UTC', p_cron, p_zone);
EXCEPTION WHEN SQLSTATE 'SW003' OR invalid_parameter_value OR feature_not_supported THEN
    RETURN format('the tick refused %s as the next instant: %s', timezone('UTC', p_at) || ' UTC', SQLERRM);
END $$;

-- Whether (p_cron, p_zone) fires at an instant in (p_after, p_upto]: the catch-up
-- check of a period waited for since p_after and ticked at p_upto. Periods fall on
-- minutes, so under a minute apart none can hide (false). The minute instants of the
-- range in order, stopping at the first that fires: a matching wall minute outside a
-- fall-back fold's second pass by the cron's masks (cron_masks_match, as the tick's
-- verdicts), and what the masks cannot tell (a fold, a spring-forward gap's end, a
-- cron without masks) by cron_fires_at(). A wall day or hour the masks exclude holds
-- no occurrence and is passed at once, to its end, when the zone's offset there is the
-- one here (the wall clock moved as far as the instant: no gap's end was passed);
-- across a change of offset, minute by minute. So the cost grows with the days waited
-- and the matching hours, not with every minute (a scheduler back after days away
-- decides its catch-ups at once); the tick asks only for a schedule a minute or more
-- late, once per (cron, zone, instant waited for). PL/pgSQL: its plans are kept for the
-- session, where a SQL function with a SET clause is planned again at every call.
-- The zone must load (the tick refuses the schedules of one that does not).
CREATE OR REPLACE FUNCTION scrinalia.cron_fires_between(p_cron text, p_zone text, p_after timestamptz,
                                                        p_upto timestamptz)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
DECLARE
    -- every minute and every hour of a wall day: the masks' day test alone, or the
    -- day's and the hour's
    every_minute constant bigint := (1::bigint << 60) - 1;
    every_hour constant integer := (1 << 24) - 1;
    m record;
    i timestamptz;
    w timestamp;
    prev_w timestamp;
    fires boolean;
    pass integer;
BEGIN
    IF p_upto - p_after < interval '1 minute' THEN
        RETURN false;
    END IF;
    SELECT c.* INTO m FROM scrinalia.archive_cron_masks c WHERE c.cron = p_cron;
    IF NOT FOUND THEN
        SELECT c.* INTO m FROM scrinalia.cron_masks_of(ARRAY[p_cron], false) c;
    END IF;
    -- the first minute boundary after p_after, in UTC (the session's zone may not fall
    -- on minutes)
    i := timezone('UTC', date_trunc('minute', timezone('UTC', p_after))) + interval '1 minute';
    prev_w := timezone(p_zone, i - interval '1 minute');
    WHILE i <= p_upto LOOP
        w := timezone(p_zone, i);
        -- (more than a minute after the previous minute's wall clock: the instant ends a gap)
        IF m.cron IS NOT NULL AND w - prev_w = interval '1 minute' THEN
            pass := CASE WHEN NOT scrinalia.cron_masks_match(every_minute, every_hour, m.doms, m.months, m.dows,
                                                             m.day_and, date_trunc('day', w))
                         THEN 1440 - (extract(hour FROM w) * 60 + extract(minute FROM w))::integer
                         WHEN NOT scrinalia.cron_masks_match(every_minute, m.hours, m.doms, m.months, m.dows,
                                                             m.day_and, date_trunc('hour', w))
                         THEN 60 - extract(minute FROM w)::integer
                         ELSE 0 END;
            IF pass > 0 AND timezone(p_zone, i + make_interval(mins => pass)) - w = make_interval(mins => pass) THEN
                i := i + make_interval(mins => pass);
                prev_w := w + make_interval(mins => pass - 1);
                CONTINUE;
            END IF;
        END IF;
        fires := CASE WHEN m.cron IS NULL THEN scrinalia.cron_fires_at(p_cron, p_zone, i)
                      WHEN scrinalia.cron_masks_match(m.minutes, m.hours, m.doms, m.months, m.dows, m.day_and, w)
                      THEN m.hour_star
                           OR w - timezone('UTC', i) >= timezone(p_zone, i - interval '3 hours')
                                                        - timezone('UTC', i - interval '3 hours')
                           OR scrinalia.cron_fires_at(p_cron, p_zone, i)
                      ELSE w - prev_w > interval '1 minute' AND scrinalia.cron_fires_at(p_cron, p_zone, i) END;
        IF fires THEN
            RETURN true;
        END IF;
        prev_w := w;
        i := i + interval '1 minute';
    END LOOP;
    RETURN false;
END $$;

-- The tick's one statement. For each (worker, next occurrence after now()) pair: an
-- unarmed schedule is armed; a due one whose worker has a QUEUED/RUNNING run or a retry still
-- owed is skipped; otherwise one SCHEDULE run is created for the period it was due
-- (however many periods were missed: one catch-up, catch_up true on the run and in the
-- answer: cron_fires_between()). All advance to p_next, but one
-- whose p_next is not an occurrence of its cron in its zone (nor the spring-forward
-- instant standing for one): REFUSED, not enqueued, not advanced, set aside with the
-- reason (arm_error) until arm_retry_interval() has passed.
-- Set-based throughout, for 100,000 schedules as for one: the slot and the owed retry
-- by hash joins, the configs kept for the workers (schedule_configs) where they hold,
-- the others by one resolve_configs() pass, then kept. Custom plans (the arrays'
-- real sizes, not a generic guess), no JIT (compiling costs more than it saves here),
-- and room to sort and hash 100,000 rows in memory rather than on disk.
-- p_due_at: only the schedules whose next_run_at is exactly that instant, which may
-- be ahead (tick_due_at); NULL: every due one given.
CREATE OR REPLACE FUNCTION scrinalia.tick_schedules_v2(p_workers text[], p_next timestamptz[], p_ticked_by text,
                                             p_due_at timestamptz)
RETURNS TABLE (worker_name text, decision text, run_id bigint, scheduled_for timestamptz,
               next_run_at timestamptz, reason text, catch_up boolean)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
SET jit = off
SET plan_cache_mode = force_custom_plan
SET work_mem = '64MB'
-- (the schedules join their verdict by hash: a merge join, which the estimates of the
-- distinct instants favour, sorts every due row on its cron text first)
SET enable_mergejoin = off
AS $$
DECLARE
    bad text;
    twice boolean;
    rule constant text := scrinalia.config_rule();
    -- $1, $2: the arrays; $3: p_due_at; $4: config_rule(); %s: the INSERT's conflict clause
    stmt constant text := $stmt$
    WITH due AS (
        -- was NULL: not armed (or outside the periods' range): armed, no run
        SELECT s.worker_name,
               CASE WHEN s.next_run_at >= scrinalia.period_start() AND s.next_run_at < scrinalia.period_end()
                    THEN s.next_run_at END AS was,
               s.request, s.cron, s.timezone, i.next_at, a.run_id AS active_run_id, o.run_id AS owed_run_id,
               k.layers_stamp,
               -- the config kept for the worker holds while resolved under its layers of
               -- now, for the request of now, by the rule of now ($4). (Tested here, not
               -- in the join: no hash of every request.)
               coalesce(k.stamp = k.layers_stamp AND k.rule = $4 AND k.request = s.request, false) AS kept,
               k.config AS kept_config, k.config_sources AS kept_sources
          FROM unnest($1, $2) AS i(worker_name, next_at)
          JOIN scrinalia.archive_worker_schedules s ON s.worker_name = i.worker_name
                                                   AND s.worker_name = ANY ($1)
          LEFT JOIN scrinalia.schedule_configs k ON k.worker_name = s.worker_name
          -- the slot (the predicate of uq_worker_run_active) and the owed retries
          LEFT JOIN scrinalia.archive_worker_runs a
                 ON a.worker_name = s.worker_name AND a.status IN ('QUEUED', 'RUNNING')
          -- the worker's first owed retry, looked up by key for each due row, and not at
          -- all when the ledger owes none. (The set of every owed retry, joined, was read
          -- again for each due row when the planner expected one: due x owed.)
          LEFT JOIN LATERAL (
              SELECT CASE WHEN (SELECT EXISTS (SELECT FROM scrinalia.archive_worker_runs x WHERE x.retry_pending))
                          THEN (SELECT min(p.run_id) FROM scrinalia.archive_worker_runs p
                                 WHERE p.retry_pending AND p.worker_name = s.worker_name)
                          END AS run_id) o ON true
         WHERE s.enabled
           AND (CASE WHEN $3 IS NULL
                     THEN s.next_run_at IS NULL OR s.next_run_at <= now() OR s.next_run_at >= scrinalia.period_end()
                     ELSE s.next_run_at = $3 END)
           -- ahead of the instant only what enqueues: whether a busy slot is still busy
           -- at the instant is for the tick at the instant to see
           AND ($3 IS NULL OR $3 <= now() OR (a.run_id IS NULL AND o.run_id IS NULL))
           FOR UPDATE OF s SKIP LOCKED
    ), instants AS MATERIALIZED (
        -- each distinct (cron, zone, next instant) once: the schedules that share a cron
        -- and a zone share their next instant, and so the verdict on it. The zones and
        -- the crons below are read from these few rows, not from every due one
        SELECT DISTINCT d.cron, d.timezone, d.next_at FROM due d
    ), zones AS MATERIALIZED (
        -- (materialized: one call per distinct zone, not per row)
        SELECT z.tz, scrinalia.zone_loads(z.tz) AS loads FROM (SELECT DISTINCT t.timezone AS tz FROM instants t) z
    ), missing_masks AS MATERIALIZED (
        -- those of a cron stored without them (a schedule written by hand), computed
        -- here, once per call
        SELECT c.* FROM scrinalia.cron_masks_of(
            ARRAY(SELECT x.cron FROM (SELECT DISTINCT t.cron FROM instants t) x
                   WHERE NOT EXISTS (SELECT FROM scrinalia.archive_cron_masks m WHERE m.cron = x.cron)), false) c
    ), walls AS MATERIALIZED (
        -- each instant on its zone's wall clock (a zone that loads only)
        SELECT t.cron, t.timezone, t.next_at, w.w,
               w.w - timezone('UTC', t.next_at) AS offset_at,
               CASE WHEN z.loads THEN timezone(t.timezone, t.next_at - interval '3 hours')
                                      - timezone('UTC', t.next_at - interval '3 hours') END AS offset_before
          FROM instants t
          JOIN zones z ON z.tz = t.timezone
         CROSS JOIN LATERAL (SELECT CASE WHEN z.loads THEN timezone(t.timezone, t.next_at) END AS w) w
    ), verdicts AS MATERIALIZED (
        -- the next instant must be an occurrence of the cron (as the rows locked have it).
        -- The masks (cron_masks_match, inlined by the planner: no call per instant) accept
        -- a matching wall minute outside a fall-back fold's second pass (no offset fall
        -- within three hours, or the hour field '*'); what they do not accept (a gap's
        -- end, a fold, no occurrence at all, no masks, a zone that does not load)
        -- cron_fires_at() decides, with the reason of a refusal.
        SELECT d.cron, d.timezone, d.next_at,
               CASE WHEN d.w IS NOT NULL AND m.cron IS NOT NULL
                         AND scrinalia.cron_masks_match(m.minutes, m.hours, m.doms, m.months, m.dows, m.day_and, d.w)
                         AND (m.hour_star OR d.offset_at >= d.offset_before)
                    THEN NULL
                    ELSE scrinalia.tick_instant_refusal(d.cron, d.timezone, d.next_at) END AS refused
          FROM walls d
          LEFT JOIN (SELECT * FROM scrinalia.archive_cron_masks
                     UNION ALL SELECT * FROM missing_masks) m ON m.cron = d.cron
    ), checked AS (
        -- (each run to create numbered here, so that the decisions need not be joined
        -- with the insert's rows, whose count the planner cannot know: it guessed a few,
        -- and a nested loop cost the square of the chunk)
        SELECT d.worker_name, d.was, d.request, d.cron, d.timezone, d.next_at, d.active_run_id, d.owed_run_id,
               d.layers_stamp, d.kept, d.kept_config, d.kept_sources, v.refused,
               CASE WHEN d.was IS NOT NULL AND d.active_run_id IS NULL AND d.owed_run_id IS NULL
                         AND v.refused IS NULL
                    THEN nextval('scrinalia.archive_worker_runs_run_id_seq') END AS new_run_id
          FROM due d
          JOIN verdicts v ON v.cron = d.cron AND v.timezone = d.timezone AND v.next_at = d.next_at
    ), fire AS (
        -- the runs to create without a config kept for them: resolved in one pass
        SELECT array_agg(d.worker_name) AS workers, array_agg(d.request) AS requests
          FROM checked d
         WHERE d.new_run_id IS NOT NULL AND NOT d.kept
    ), resolved AS MATERIALIZED (
        SELECT rc.worker_name, rc.config, rc.sources
          FROM fire f
         CROSS JOIN LATERAL scrinalia.resolve_configs(f.workers, f.requests) rc
         WHERE f.workers IS NOT NULL
    ), keep AS (
        -- the rows to keep the resolved configs in; one a catalogue change holds is
        -- skipped (kept at a later tick), never waited for
        SELECT k.worker_name
          FROM scrinalia.schedule_configs k
         WHERE k.worker_name IN (SELECT r.worker_name FROM resolved r)
           FOR NO KEY UPDATE OF k SKIP LOCKED
    ), kept AS (
        -- each kept under the layers_stamp read in this statement's snapshot: a change of
        -- the layers committed since renewed it, and the config kept here does not hold
        UPDATE scrinalia.schedule_configs k
           SET stamp = d.layers_stamp, rule = $4, request = d.request, config = r.config,
               config_sources = r.sources
          FROM keep l
          JOIN resolved r ON r.worker_name = l.worker_name
          JOIN checked d ON d.worker_name = r.worker_name
         WHERE k.worker_name = l.worker_name AND d.layers_stamp IS NOT NULL
    ), missed AS MATERIALIZED (
        -- whether periods were missed (the run a catch-up): once per (cron, zone,
        -- instant waited for) of those that may enqueue a minute or more late; on time
        -- (the usual tick, tick_due_at) none is, and nothing is evaluated. Those that
        -- missed some, looked up below as a hashed set (a join of the chunk's rows with
        -- these, whose count the planner cannot know, was a nested loop). OFFSET 0: the
        -- check stays above the DISTINCT, not pushed down to every late run's row
        SELECT t.cron, t.timezone, t.was
          FROM (SELECT DISTINCT d.cron, d.timezone, d.was FROM checked d
                 WHERE d.was <= now() - interval '1 minute' AND d.new_run_id IS NOT NULL
                OFFSET 0) t
         WHERE scrinalia.cron_fires_between(t.cron, t.timezone, t.was, now())
    ), ins AS (
        INSERT INTO scrinalia.archive_worker_runs AS r
               (run_id, worker_name, trigger, request, config, config_sources, scheduled_for, requested_by,
                created_at, catch_up)
        OVERRIDING SYSTEM VALUE
        -- (created as of its due instant when ticked ahead of it: tick_due_at). The kept
        -- configs need no join: only those resolved are joined with their rows
        SELECT d.new_run_id, d.worker_name, 'SCHEDULE'::scrinalia.run_trigger, d.request, d.kept_config,
               d.kept_sources, d.was, 'scheduler', greatest(now(), d.was),
               (d.cron, d.timezone, d.was) IN (SELECT x.cron, x.timezone, x.was FROM missed x)
          FROM checked d
         WHERE d.new_run_id IS NOT NULL AND d.kept
        UNION ALL
        SELECT d.new_run_id, d.worker_name, 'SCHEDULE'::scrinalia.run_trigger, d.request, r.config, r.sources,
               d.was, 'scheduler', greatest(now(), d.was),
               (d.cron, d.timezone, d.was) IN (SELECT x.cron, x.timezone, x.was FROM missed x)
          FROM resolved r
          JOIN checked d ON d.worker_name = r.worker_name  -- one schedule per worker
        %s
        RETURNING r.run_id
    ), decided AS MATERIALIZED (
        -- (materialized: inlined into the UPDATE, each decision was computed again at
        -- each of its references there)
        SELECT d.worker_name, d.was, d.next_at, r.run_id,
               CASE WHEN r.run_id IS NOT NULL
                    THEN (d.cron, d.timezone, d.was) IN (SELECT x.cron, x.timezone, x.was FROM missed x)
                    END AS catch_up,
               CASE WHEN d.refused IS NOT NULL THEN 'REFUSED'
                    WHEN d.was IS NULL THEN 'ARMED'
                    WHEN r.run_id IS NOT NULL THEN 'ENQUEUED'
                    ELSE 'SKIPPED' END AS decision,
               CASE WHEN d.refused IS NOT NULL THEN left(d.refused, scrinalia.max_arm_error_length())
                    WHEN d.was IS NULL OR r.run_id IS NOT NULL THEN NULL
                    WHEN d.active_run_id IS NOT NULL THEN format('run #%%s is active', d.active_run_id)
                    WHEN d.owed_run_id IS NOT NULL THEN format('run #%%s awaits its retry', d.owed_run_id)
                    ELSE 'the slot or the period was taken concurrently' END AS reason
          FROM checked d
         -- (the run numbered for it, when inserted: ON CONFLICT DO NOTHING may not have;
         -- a hashed set of the inserted, not a join)
         CROSS JOIN LATERAL (SELECT CASE WHEN d.new_run_id IN (SELECT i.run_id FROM ins i)
                                         THEN d.new_run_id END AS run_id) r
    ), upd AS (
        -- a refused schedule is neither enqueued nor advanced: set aside (as when the
        -- shim cannot compute it), shown by health and the alerts, tried again later
        UPDATE scrinalia.archive_worker_schedules s
           SET next_run_at = CASE WHEN x.decision = 'REFUSED' THEN s.next_run_at ELSE x.next_at END,
               last_enqueued_at = CASE WHEN x.decision = 'ENQUEUED' THEN now() ELSE s.last_enqueued_at END,
               last_run_id = coalesce(x.run_id, s.last_run_id),
               last_skipped_at = CASE WHEN x.decision = 'SKIPPED' THEN now() ELSE s.last_skipped_at END,
               last_skip_reason = CASE WHEN x.decision = 'SKIPPED' THEN x.reason ELSE s.last_skip_reason END,
               skipped_count = s.skipped_count + (x.decision = 'SKIPPED')::int,
               -- (the skips in a row start again: starved_schedules())
               skipped_count_at_enqueue = CASE WHEN x.decision = 'ENQUEUED' THEN s.skipped_count
                                               ELSE s.skipped_count_at_enqueue END,
               arm_error = CASE WHEN x.decision = 'REFUSED' THEN x.reason END,
               arm_error_since = CASE WHEN x.decision = 'REFUSED' THEN coalesce(s.arm_error_since, now()) END,
               arm_retry_at = CASE WHEN x.decision = 'REFUSED' THEN now() + scrinalia.arm_retry_interval() END
          FROM decided x
         WHERE s.worker_name = x.worker_name
        RETURNING s.worker_name, x.decision, x.run_id, x.was,
                  CASE WHEN x.decision = 'REFUSED' THEN s.next_run_at ELSE x.next_at END, x.reason, x.catch_up
    )
    SELECT u.worker_name, u.decision, u.run_id, u.was, u.next_at, u.reason, u.catch_up
      FROM upd u
     ORDER BY u.worker_name
$stmt$;
BEGIN
    PERFORM scrinalia.check_scheduler_caller('tick_v2');
    PERFORM scrinalia.check_array_lengths(
        'SW030', 'tick takes two arrays of the same length: worker names and their next occurrences',
        ARRAY[cardinality(p_workers), cardinality(p_next)]);
    -- one pass over the input: the first bad pair, and whether a worker is named twice
    SELECT min(format('%s -> %s', i.w, coalesce(i.n::text, 'NULL')))
               FILTER (WHERE i.w IS NULL OR i.n IS NULL OR i.n <= now() OR i.n >= scrinalia.period_end()),
           count(DISTINCT i.w) <> count(*)
      INTO bad, twice
      FROM unnest(p_workers, p_next) AS i(w, n);
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SW030',
            MESSAGE = format('tick: every next occurrence must be after now() (%s), finite and before %s: %s',
                             now(), scrinalia.period_end(), bad),
            HINT = 'compute next occurrences after the transaction''s now(), as due_schedules() returns it';
    END IF;
    IF twice THEN
        RAISE EXCEPTION USING ERRCODE = 'SW030', MESSAGE = 'tick: a worker is named twice';
    END IF;

    -- Not waited for: a transaction holding the row must not hold up the periods (the
    -- tick then goes unrecorded, and scheduler_health() names the holder).
    UPDATE scrinalia.scheduler_state st
       SET last_tick_at = now(), last_tick_by = scrinalia.check_actor('ticked_by', p_ticked_by),
           ticks = st.ticks + 1
     WHERE st.id = (SELECT x.id FROM scrinalia.scheduler_state x FOR NO KEY UPDATE SKIP LOCKED);

    -- First without ON CONFLICT: speculative insertion costs about a tenth of the
    -- statement, and only a run committed meanwhile (too late for its snapshot) by a
    -- writer that did not hold the schedule's row as enqueue does (the owner by hand)
    -- can conflict. Then the whole statement again, ON
    -- CONFLICT DO NOTHING, in a fresh snapshot: nothing of the first attempt remains
    -- (its rows were not returned yet: the final ORDER BY needs every row first).
    -- The foreign-key check on each inserted run would be planned anew for every row
    -- under force_custom_plan: auto from here on, where it keeps its plan (a lookup by
    -- primary key). The statement itself is a one-shot EXECUTE, planned with the
    -- arrays' values either way; the function's SET clause restores the mode at exit.
    PERFORM set_config('plan_cache_mode', 'auto', true);
    BEGIN
        RETURN QUERY EXECUTE format(stmt, '') USING p_workers, p_next, p_due_at, rule;
    EXCEPTION WHEN unique_violation THEN
        RETURN QUERY EXECUTE format(stmt, 'ON CONFLICT DO NOTHING') USING p_workers, p_next, p_due_at, rule;
    END;

    IF FOUND THEN
        PERFORM pg_notify('scrinalia_runs', 'tick');
    END IF;
END $$;

-- The tick, one statement for all the given workers (see tick_schedules_v2), with
-- each decision's catch_up.
CREATE OR REPLACE FUNCTION scrinalia.tick_v2(p_workers text[], p_next timestamptz[], p_ticked_by text DEFAULT NULL)
RETURNS TABLE (worker_name text, decision text, run_id bigint, scheduled_for timestamptz,
               next_run_at timestamptz, reason text, catch_up boolean)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
BEGIN
    RETURN QUERY SELECT * FROM scrinalia.tick_schedules_v2(p_workers, p_next, p_ticked_by, NULL);
END $$;

-- tick_v2 without catch_up: what the schedulers of earlier releases call (a result
-- cannot change in place). The runs they create record their catch-up all the same.
CREATE OR REPLACE FUNCTION scrinalia.tick(p_workers text[], p_next timestamptz[], p_ticked_by text DEFAULT NULL)
RETURNS TABLE (worker_name text, decision text, run_id bigint, scheduled_for timestamptz,
               next_run_at timestamptz, reason text)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
BEGIN
    RETURN QUERY SELECT t.worker_name, t.decision, t.run_id, t.scheduled_for, t.next_run_at, t.reason
                   FROM scrinalia.tick_schedules_v2(p_workers, p_next, p_ticked_by, NULL) t;
END $$;

-- The tick of the schedules due at one known instant, prepared ahead: the scheduler
-- reads them (schedules_due_at) and computes their next occurrences before the
-- instant, and sends this call (with its lock check and COMMIT, one pipeline) up to
-- max_tick_ahead() before it. Ahead of the instant it only enqueues: a schedule whose
-- worker's slot is busy (or owed a retry) then is left to the ordinary tick at the
-- instant, which sees whether it still is. The work is done at once; then the call waits, on the
-- server's clock, until p_due_at, and only then returns: the COMMIT that follows makes
-- the runs visible at the instant, never before it, with no CPU left to find at the
-- boundary. Meanwhile the ticked schedules are row-locked and the slots of the runs
-- taken (a manual enqueue of one of those workers then answers SW010, as just after).
-- Only a schedule whose next_run_at is still exactly p_due_at is ticked: one whose cron
-- or zone changed meanwhile was cleared (NULL) by put_schedule and is left to the next
-- ordinary tick, which arms it from its new cron.
CREATE OR REPLACE FUNCTION scrinalia.tick_due_at_v2(p_due_at timestamptz, p_workers text[], p_next timestamptz[],
                                         p_ticked_by text DEFAULT NULL)
RETURNS TABLE (worker_name text, decision text, run_id bigint, scheduled_for timestamptz,
               next_run_at timestamptz, reason text, catch_up boolean)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
BEGIN
    PERFORM scrinalia.check_scheduler_caller('tick_due_at_v2');
    IF p_due_at IS NULL OR NOT isfinite(p_due_at) OR p_due_at > now() + scrinalia.max_tick_ahead() THEN
        RAISE EXCEPTION USING ERRCODE = 'SW030',
            MESSAGE = format('tick_due_at takes a finite instant at most %s ahead of now() (%s), not %s',
                             scrinalia.max_tick_ahead(), now(), coalesce(p_due_at::text, 'NULL'));
    END IF;
    RETURN QUERY SELECT * FROM scrinalia.tick_schedules_v2(p_workers, p_next, p_ticked_by, p_due_at);
    -- (a loop: pg_sleep may return a little early, and never before the instant)
    WHILE clock_timestamp() < p_due_at LOOP
        PERFORM pg_sleep(greatest(extract(epoch FROM p_due_at - clock_timestamp()), 0.001));
    END LOOP;
END $$;

-- tick_due_at_v2 without catch_up, for the schedulers of earlier releases.
CREATE OR REPLACE FUNCTION scrinalia.tick_due_at(p_due_at timestamptz, p_workers text[], p_next timestamptz[],
                                      p_ticked_by text DEFAULT NULL)
RETURNS TABLE (worker_name text, decision text, run_id bigint, scheduled_for timestamptz,
               next_run_at timestamptz, reason text)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
BEGIN
    RETURN QUERY SELECT t.worker_name, t.decision, t.run_id, t.scheduled_for, t.next_run_at, t.reason
                   FROM scrinalia.tick_due_at_v2(p_due_at, p_workers, p_next, p_ticked_by) t;
END $$;

-- The schedules due at exactly p_at (enabled, not set aside), the first p_limit by
-- worker name: what a tick_due_at() at that instant will tick, read ahead so that the
-- next occurrences are ready then.
CREATE OR REPLACE FUNCTION scrinalia.schedules_due_at(p_at timestamptz, p_limit integer DEFAULT 5000)
RETURNS TABLE (worker_name text, cron text, timezone text)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
    SELECT s.worker_name, s.cron, s.timezone
      FROM scrinalia.archive_worker_schedules s
     WHERE s.next_run_at = p_at AND s.enabled AND s.arm_error IS NULL
     ORDER BY s.worker_name
     LIMIT greatest(p_limit, 0)
$$;

-- The retry delay after attempt n with a given jitter in [-0.2, 0.2]:
-- min(min(60 * 2^(n-1), 1800) * (1 + jitter), 1800) seconds (retry_base_delay(),
-- retry_max_delay() and retry_jitter() in 05_policy.sql).
CREATE OR REPLACE FUNCTION scrinalia.retry_delay(p_attempt integer, p_jitter double precision)
RETURNS interval
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    base double precision := extract(epoch FROM scrinalia.retry_base_delay());
    cap double precision := extract(epoch FROM scrinalia.retry_max_delay());
BEGIN
    IF p_attempt IS NULL OR p_attempt < 1 OR p_jitter IS NULL
       OR p_jitter < -scrinalia.retry_jitter() OR p_jitter > scrinalia.retry_jitter() THEN
        RAISE EXCEPTION USING ERRCODE = 'SW002',
            MESSAGE = format('retry_delay takes an attempt >= 1 and a jitter in [%s, %s], not %s and %s',
                             -scrinalia.retry_jitter(), scrinalia.retry_jitter(), p_attempt, p_jitter);
    END IF;
    -- (2^31 already passes any cap: the exponent stops there rather than overflow)
    RETURN make_interval(secs => least(least(base * power(2, least(p_attempt, 32) - 1), cap) * (1 + p_jitter), cap));
END $$;

CREATE OR REPLACE FUNCTION scrinalia.retry_backoff(p_attempt integer)
RETURNS interval
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$ SELECT scrinalia.retry_delay(p_attempt, (random() * 2 - 1) * scrinalia.retry_jitter()) $$;

-- Creates the retry row of every SCHEDULE attempt 1 or 2 that ended FAILED or
-- INTERRUPTED: same request, attempt + 1, retry_of, not_before = now() + backoff.
-- Reads only the rows marked retry_pending (a partial index), never the history. A
-- candidate whose worker's slot is taken (a manual run) stays pending for a later tick.
-- The configs: one resolve_configs() pass over the distinct (worker, request) pairs.
CREATE OR REPLACE FUNCTION scrinalia.create_retries()
RETURNS TABLE (run_id bigint, retry_of bigint, worker_name text, attempt integer, not_before timestamptz)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
SET jit = off
AS $$
BEGIN
    PERFORM scrinalia.check_scheduler_caller('create_retries');
    RETURN QUERY
    WITH cand AS (
        -- Each candidate's worker row by its key, not a join with every worker (a hash
        -- join read the whole catalogue at every pass while a retry was owed). A slot
        -- a live run holds (uq_worker_run_active's predicate) keeps the retry owed
        -- without an insert to try; a worker whose slot an open enqueue holds waits for
        -- a later pass (see enqueue), and ON CONFLICT catches a run committed meanwhile.
        -- (OFFSET 0: the free slots first, then only their workers' rows locked)
        SELECT c.run_id, c.worker_name, c.request, c.attempt, c.scheduled_for
          FROM (SELECT p.run_id, p.worker_name, p.request, p.attempt, p.scheduled_for
                  FROM scrinalia.archive_worker_runs p
                 WHERE p.retry_pending
                   AND NOT EXISTS (SELECT FROM scrinalia.archive_worker_runs a
                                    WHERE a.worker_name = p.worker_name AND a.status IN ('QUEUED', 'RUNNING'))
                OFFSET 0) c
         WHERE EXISTS (SELECT FROM scrinalia.archive_workers w WHERE w.worker_name = c.worker_name
                          FOR NO KEY UPDATE SKIP LOCKED)
         ORDER BY c.run_id
           FOR UPDATE OF c SKIP LOCKED
    ), cfg AS (
        SELECT rc.worker_name, rc.request, rc.config, rc.sources
          FROM (SELECT array_agg(c.worker_name) AS workers, array_agg(c.request) AS requests FROM cand c) a
         CROSS JOIN LATERAL scrinalia.resolve_configs(a.workers, a.requests) rc
    ), ins AS (
        INSERT INTO scrinalia.archive_worker_runs AS r
               (worker_name, trigger, request, config, config_sources, attempt, retry_of,
                not_before, scheduled_for, requested_by)
        SELECT c.worker_name, 'SCHEDULE', c.request, g.config, g.sources, c.attempt + 1, c.run_id,
               now() + scrinalia.retry_backoff(c.attempt), c.scheduled_for, 'scheduler'
          FROM cand c
          JOIN cfg g ON g.worker_name = c.worker_name AND g.request = c.request
        ON CONFLICT DO NOTHING
        RETURNING r.run_id, r.retry_of, r.worker_name, r.attempt, r.not_before
    ), done AS (
        UPDATE scrinalia.archive_worker_runs o SET retry_pending = false
          FROM ins WHERE o.run_id = ins.retry_of
        RETURNING o.run_id
    )
    SELECT ins.run_id, ins.retry_of, ins.worker_name, ins.attempt, ins.not_before
      FROM ins JOIN done ON done.run_id = ins.retry_of
     ORDER BY ins.run_id;
    IF FOUND THEN
        PERFORM pg_notify('scrinalia_runs', 'retry');
    END IF;
END $$;

-- The earliest instant the scheduler has work: a due or unarmed schedule, a set-aside
-- one's retry, an owed retry, or a lease to reap. NULL when there is nothing at all.
-- Only instants inside period_start()..period_end(): a hand-written 'infinity' or 4713
-- BC must not stop (or crash) the sleep. Below the range is work now (a schedule the
-- tick re-arms, a set-aside one to retry, a lease to reap); above it, never.
CREATE OR REPLACE FUNCTION scrinalia.next_wakeup()
RETURNS timestamptz
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
    SELECT least(
        (SELECT min(s.next_run_at) FROM scrinalia.archive_worker_schedules s
          WHERE s.enabled AND s.arm_error IS NULL
            AND s.next_run_at >= scrinalia.period_start() AND s.next_run_at < scrinalia.period_end()),
        (SELECT now() FROM scrinalia.archive_worker_schedules s
          WHERE s.enabled AND s.arm_error IS NULL
            AND (s.next_run_at IS NULL OR s.next_run_at < scrinalia.period_start()
                 OR s.next_run_at >= scrinalia.period_end()) LIMIT 1),
        (SELECT greatest(min(s.arm_retry_at), scrinalia.period_start()) FROM scrinalia.archive_worker_schedules s
          WHERE s.enabled AND s.arm_error IS NOT NULL AND s.arm_retry_at < scrinalia.period_end()
         HAVING count(*) > 0),
        (SELECT min(r.lease_expires_at) FROM scrinalia.archive_worker_runs r
          WHERE r.status = 'RUNNING' AND coalesce(r.heartbeat_at, r.started_at) >= pg_postmaster_start_time()
            AND r.lease_expires_at >= scrinalia.period_start() AND r.lease_expires_at < scrinalia.period_end()),
        -- a lease last renewed before the server started is held a while longer
        -- (lease_held_until): wake when that ends, not at its expiry, which the reaper
        -- would pass over (a pass at every wake-up in between); few rows, those
        -- started before the start (ix_worker_runs_running_started)
        (SELECT min(scrinalia.lease_held_until(r.lease_expires_at, r.lease_duration,
                                               coalesce(r.heartbeat_at, r.started_at)))
           FROM scrinalia.archive_worker_runs r
          WHERE r.status = 'RUNNING' AND r.started_at < pg_postmaster_start_time()
            AND coalesce(r.heartbeat_at, r.started_at) < pg_postmaster_start_time()
            AND r.lease_expires_at >= scrinalia.period_start() AND r.lease_expires_at < scrinalia.period_end()),
        (SELECT now() FROM scrinalia.archive_worker_runs r
          WHERE r.status = 'RUNNING' AND r.lease_expires_at < scrinalia.period_start() LIMIT 1),
        (SELECT now() FROM scrinalia.archive_worker_runs r WHERE r.retry_pending LIMIT 1))
$$;
