-- Schedule previews: the next instants a schedule fires, computed in SQL by the rules
-- of docs/cron.md (the shim's cron.next_occurrence is the twin;
-- tests/cron/test_cron_previews_agreement.py pins that they agree across DST changes).
-- The wall times the fields select are walked in order, day by day in the zone; one
-- that no DST change is near is the one instant it names. Near a change (the zone's
-- offset differs three hours before and after it) every reading of it is a candidate:
-- with the offset before the change, with the offset after it, and for a wall time that
-- exists neither way (a spring-forward gap) the first instant after the gap; the cron
-- matcher of 20_cron.sql, cron_fires_at(), decides which of them fire.
-- Errors: SW002 a count out of range, SW001 an unknown worker, SW005 no schedule or a
-- paused one.

-- The UTC offset of the zone at an instant.
CREATE OR REPLACE FUNCTION scrinalia.zone_offset(p_zone text, p_at timestamptz)
RETURNS interval
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT (p_at AT TIME ZONE p_zone) - (p_at AT TIME ZONE 'UTC') $$;

-- The first p_count instants after p_after at which (p_cron, p_zone) fires, earliest
-- first: each with its wall time and offset in the zone, and why a DST change moved
-- it (NULL when none did). Fewer rows only past a thousand years. Raises SW003 for an
-- invalid cron; a zone PostgreSQL does not know raises its own error.
CREATE OR REPLACE FUNCTION scrinalia.cron_fire_previews(p_cron text, p_zone text, p_after timestamptz,
                                                        p_count integer)
RETURNS TABLE (fires_at timestamptz, local_time timestamp, utc_offset interval, note text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    f text[];
    mins int[]; hours int[]; doms int[]; months int[]; dows int[];
    day_and boolean;
    hour_star boolean;
    d date;
    last_day date;
    h int;
    mi int;
    w timestamp;
    i1 timestamptz;
    ob interval;             -- the offset before a change near w, and after it
    oa interval;
    c_before timestamptz;    -- w read with each
    c_after timestamptz;
    lo timestamptz;
    hi timestamptz;
    mid timestamptz;
    cands timestamptz[];
    notes text[];
    k int;
    at_ timestamptz[] := '{}';
    why text[] := '{}';
    nth timestamptz;         -- the p_count-th earliest found so far
    day_ok boolean;
BEGIN
    PERFORM scrinalia.validate_cron(p_cron);
    IF p_count IS NULL OR p_count < 1 OR p_after IS NULL OR NOT isfinite(p_after) THEN
        RETURN;
    END IF;
    f := regexp_split_to_array(btrim(p_cron, E' \t'), E'[ \t]+');
    mins := ARRAY(SELECT DISTINCT v FROM unnest(scrinalia.cron_field_values(f[1], 1)) v ORDER BY v);
    hours := ARRAY(SELECT DISTINCT v FROM unnest(scrinalia.cron_field_values(f[2], 2)) v ORDER BY v);
    doms := scrinalia.cron_field_values(f[3], 3);
    months := scrinalia.cron_field_values(f[4], 4);
    dows := scrinalia.cron_field_values(f[5], 5);
    day_and := left(f[3], 1) = '*' OR left(f[5], 1) = '*';
    hour_star := f[2] = '*';
    -- from three hours of wall time before: the second pass of a repeated hour may be
    -- after p_after while its wall time is before p_after's
    d := ((p_after - interval '3 hours') AT TIME ZONE p_zone)::date;
    last_day := (d + interval '1000 years')::date;
    <<days>>
    WHILE d <= last_day LOOP
        IF NOT extract(month FROM d)::int = ANY (months) THEN
            d := (date_trunc('month', d) + interval '1 month')::date;
            CONTINUE;
        END IF;
        day_ok := CASE WHEN day_and
                       THEN extract(day FROM d)::int = ANY (doms) AND extract(dow FROM d)::int = ANY (dows)
                       ELSE extract(day FROM d)::int = ANY (doms) OR extract(dow FROM d)::int = ANY (dows) END;
        IF day_ok THEN
            FOREACH h IN ARRAY hours LOOP
                FOREACH mi IN ARRAY mins LOOP
                    w := d + make_time(h, mi, 0);
                    i1 := w AT TIME ZONE p_zone;
                    -- every later wall time is later than the p_count-th instant found
                    -- (no reading of one is more than a DST change earlier than i1)
                    EXIT days WHEN nth IS NOT NULL AND i1 - interval '3 hours' > nth;
                    ob := scrinalia.zone_offset(p_zone, i1 - interval '3 hours');
                    oa := scrinalia.zone_offset(p_zone, i1 + interval '3 hours');
                    IF ob = oa THEN
                        cands := ARRAY[i1];
                        notes := ARRAY[NULL::text];
                    ELSE
                        c_before := (w - ob) AT TIME ZONE 'UTC';
                        c_after := (w - oa) AT TIME ZONE 'UTC';
                        cands := '{}';
                        notes := '{}';
                        IF (c_before AT TIME ZONE p_zone) = w AND (c_after AT TIME ZONE p_zone) = w
                           AND c_before <> c_after THEN
                            -- a fall-back fold: w happens twice (cron_fires_at fires the
                            -- second pass only for an hour field of '*')
                            cands := ARRAY[least(c_before, c_after), greatest(c_before, c_after)];
                            notes := ARRAY[
                                format('%s occurs twice on %s: %s', to_char(w, 'HH24:MI'), to_char(w, 'YYYY-MM-DD'),
                                       CASE WHEN hour_star THEN 'fires at both, the hour keeps its rhythm'
                                            ELSE 'fires once, at the first' END),
                                format('%s occurs twice on %s: the second time, as the hour field is *',
                                       to_char(w, 'HH24:MI'), to_char(w, 'YYYY-MM-DD'))];
                        ELSIF (c_before AT TIME ZONE p_zone) = w THEN
                            cands := ARRAY[c_before];
                            notes := ARRAY[NULL::text];
                        ELSIF (c_after AT TIME ZONE p_zone) = w THEN
                            cands := ARRAY[c_after];
                            notes := ARRAY[NULL::text];
                        ELSE
                            -- a spring-forward gap: the change itself, to the second,
                            -- between w read after it and w read before it
                            lo := least(c_before, c_after);
                            hi := greatest(c_before, c_after);
                            WHILE hi - lo > interval '1 second' LOOP
                                mid := lo + (hi - lo) / 2;
                                IF scrinalia.zone_offset(p_zone, mid) = scrinalia.zone_offset(p_zone, hi) THEN
                                    hi := mid;
                                ELSE
                                    lo := mid;
                                END IF;
                            END LOOP;
                            hi := date_trunc('second', hi);
                            cands := ARRAY[hi];
                            notes := ARRAY[format('%s does not exist on %s: fires at %s', to_char(w, 'HH24:MI'),
                                                  to_char(w, 'YYYY-MM-DD'), to_char(hi AT TIME ZONE p_zone, 'HH24:MI'))];
                        END IF;
                        -- the matcher decides, near a change
                        FOR k IN 1..cardinality(cands) LOOP
                            IF NOT scrinalia.cron_fires_at(p_cron, p_zone, cands[k]) THEN
                                cands[k] := NULL;
                            END IF;
                        END LOOP;
                    END IF;
                    FOR k IN 1..cardinality(cands) LOOP
                        IF cands[k] > p_after AND NOT cands[k] = ANY (at_) THEN
                            at_ := at_ || cands[k];
                            why := why || notes[k];
                            IF cardinality(at_) >= p_count THEN
                                nth := (SELECT x FROM unnest(at_) x ORDER BY x OFFSET p_count - 1 LIMIT 1);
                            END IF;
                        END IF;
                    END LOOP;
                END LOOP;
            END LOOP;
        END IF;
        d := d + 1;
    END LOOP;
    RETURN QUERY
    SELECT x.t, x.t AT TIME ZONE p_zone, scrinalia.zone_offset(p_zone, x.t), x.n
      FROM unnest(at_, why) AS x(t, n)
     ORDER BY x.t
     LIMIT p_count;
END $$;

-- The next p_count instants (default 10, at most max_fire_previews()) at which the
-- worker's schedule fires from now on, earliest first: n from 1, the instant, its wall
-- time and offset in the schedule's zone, and why a DST change moved it (NULL when none
-- did). A preview of the cron: the scheduler's stored next_run_at is the first of them
-- once it has armed the schedule as it now is.
CREATE OR REPLACE FUNCTION scrinalia.next_fires(p_worker text, p_count integer DEFAULT 10)
RETURNS TABLE (n integer, fires_at timestamptz, local_time timestamp, timezone text, utc_offset interval,
               note text)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
DECLARE
    s record;
BEGIN
    IF p_count IS NULL OR p_count < 1 OR p_count > scrinalia.max_fire_previews() THEN
        RAISE EXCEPTION USING ERRCODE = 'SW002',
            MESSAGE = format('next_fires previews 1 to %s instants, not %s', scrinalia.max_fire_previews(),
                             coalesce(p_count::text, 'NULL')),
            HINT = format('pass a count from 1 to %s', scrinalia.max_fire_previews());
    END IF;
    PERFORM scrinalia.require_worker(p_worker);  -- SW001
    SELECT sc.cron, sc.timezone AS zone, sc.enabled INTO s
      FROM scrinalia.archive_worker_schedules sc WHERE sc.worker_name = p_worker;
    IF NOT FOUND THEN
        PERFORM scrinalia.raise_no_schedule(p_worker);  -- SW005
    END IF;
    IF NOT s.enabled THEN
        RAISE EXCEPTION USING ERRCODE = 'SW005',
            MESSAGE = format('the schedule of worker %s is paused: it fires nothing until resumed',
                             quote_literal(left(p_worker, 100))),
            HINT = 'resume it (set_schedule_enabled, or scrinalia-workers schedule resume); '
                   'the periods missed while paused are not caught up';
    END IF;
    RETURN QUERY
    SELECT (row_number() OVER (ORDER BY p.fires_at))::integer, p.fires_at, p.local_time, s.zone, p.utc_offset, p.note
      FROM scrinalia.cron_fire_previews(s.cron, s.zone, now(), p_count) p
     ORDER BY p.fires_at;
END $$;
