-- Cron validation in SQL, so that a schedule saved from psql is held to the same
-- strict five-field language as one saved through the shim (docs/cron.md).
-- This is the twin of scrinalia_workers/cron.py: same grammar, same order of checks,
-- same messages; tests/cron/test_cron_sql_agreement.py pins that they agree.
-- One self-contained function (no helpers), so that its EXECUTE grant is all a
-- role needs. Error: SW003, the message names the field (1-based) when there is one.

CREATE OR REPLACE FUNCTION scrinalia.validate_cron(expr text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    field_names constant text[] := ARRAY['minute', 'hour', 'day-of-month', 'month', 'day-of-week'];
    lows constant int[] := ARRAY[0, 0, 1, 1, 0];
    highs constant int[] := ARRAY[59, 23, 31, 12, 7];
    month_names constant text[] := ARRAY['JAN','FEB','MAR','APR','MAY','JUN','JUL','AUG','SEP','OCT','NOV','DEC'];
    day_names constant text[] := ARRAY['SUN','MON','TUE','WED','THU','FRI','SAT'];  -- value = index - 1
    month_days constant int[] := ARRAY[31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    item_re constant text :=
        '^(?:(\*)|([0-9]{1,2}|[A-Za-z]{3})(?:-([0-9]{1,2}|[A-Za-z]{3}))?)(?:/([0-9]{1,2}))?$';
    src text;
    fields text[];
    f int;
    item text;
    m text[];
    toks text[];
    vals int[];
    k int;
    tok text;
    v int;
    lo int;
    hi int;
    step int;
    span int;
    detail text;
    min_dom int;
    max_month_days int;
BEGIN
    IF expr IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SW003', MESSAGE = 'invalid cron: expression is missing';
    END IF;
    IF length(expr) > scrinalia.max_cron_length() THEN
        RAISE EXCEPTION USING ERRCODE = 'SW003',
            MESSAGE = format('invalid cron: expression is longer than %s characters', scrinalia.max_cron_length());
    END IF;
    src := btrim(expr, E' \t');
    IF src = '' THEN
        RAISE EXCEPTION USING ERRCODE = 'SW003', MESSAGE = 'invalid cron: expression is empty';
    END IF;
    fields := regexp_split_to_array(src, E'[ \t]+');
    IF cardinality(fields) <> 5 THEN
        IF left(src, 1) = '@' THEN
            RAISE EXCEPTION USING ERRCODE = 'SW003', MESSAGE = format(
                'invalid cron "%s": macros such as @daily are not supported; '
                'write the five fields (e.g. 0 0 * * *)', src);
        END IF;
        RAISE EXCEPTION USING ERRCODE = 'SW003', MESSAGE = format(
            'invalid cron "%s": expected 5 fields (minute hour day-of-month month day-of-week), got %s',
            src, cardinality(fields));
    END IF;

    FOR f IN 1..5 LOOP
        span := highs[f] - lows[f] + 1;
        FOREACH item IN ARRAY string_to_array(fields[f], ',') LOOP
            detail := NULL;
            m := regexp_match(item, item_re);
            IF item = '' THEN
                detail := format('empty item in list "%s"', fields[f]);
            ELSIF m IS NULL THEN
                detail := format('"%s" is not a valid item (expected *, */S, N, N-M or N-M/S; '
                                 'L, W, #, ? and H are not supported)', item);
            ELSIF m[4] IS NOT NULL AND m[1] IS NULL AND m[3] IS NULL THEN
                detail := format('"%s": a step needs * or a range (write N-M/S)', item);
            ELSIF m[1] IS NULL THEN
                -- the range endpoints, start then end: a name or a number in range
                toks := ARRAY[m[2], coalesce(m[3], m[2])];
                vals := ARRAY[]::int[];
                FOR k IN 1..2 LOOP
                    tok := toks[k];
                    IF tok ~ '^[A-Za-z]' THEN
                        IF f = 4 THEN
                            v := array_position(month_names, upper(tok));
                            IF v IS NULL THEN
                                detail := format('"%s" is not a month name (JAN..DEC)', tok);
                            END IF;
                        ELSIF f = 5 THEN
                            v := array_position(day_names, upper(tok)) - 1;
                            IF v IS NULL THEN
                                detail := format('"%s" is not a day name (SUN..SAT)', tok);
                            END IF;
                        ELSE
                            detail := format('"%s": names are allowed only in the month and day-of-week fields', tok);
                        END IF;
                    ELSE
                        v := tok::int;
                        IF v < lows[f] OR v > highs[f] THEN
                            detail := format('%s is out of range %s-%s', v, lows[f], highs[f]);
                        END IF;
                    END IF;
                    EXIT WHEN detail IS NOT NULL;
                    vals := vals || v;
                END LOOP;
                IF detail IS NULL AND vals[1] > vals[2] THEN
                    detail := format('"%s": range start %s is after its end %s', item, vals[1], vals[2]);
                END IF;
            END IF;
            IF detail IS NULL AND m[4] IS NOT NULL THEN
                step := m[4]::int;
                IF step < 1 OR step > span THEN
                    detail := format('"%s": step %s is out of range 1-%s', item, step, span);
                END IF;
            END IF;
            IF detail IS NOT NULL THEN
                RAISE EXCEPTION USING ERRCODE = 'SW003', MESSAGE = format(
                    'invalid cron "%s": field %s (%s): %s', src, f, field_names[f], detail);
            END IF;
            -- what the never-fires check below needs: the smallest day, the months
            IF m[1] IS NOT NULL THEN
                lo := lows[f]; hi := highs[f];
            ELSE
                lo := vals[1]; hi := vals[2];
            END IF;
            IF f = 3 THEN
                min_dom := least(min_dom, lo);
            ELSIF f = 4 THEN
                FOR k IN lo..hi BY coalesce(m[4]::int, 1) LOOP
                    max_month_days := greatest(max_month_days, month_days[k]);
                END LOOP;
            END IF;
        END LOOP;
    END LOOP;

    -- A day-of-month that exists in none of the months, ANDed (Vixie) with a
    -- day-of-week starting with '*', would never fire: refuse it now.
    IF left(fields[3], 1) <> '*' AND left(fields[5], 1) = '*' AND min_dom > max_month_days THEN
        RAISE EXCEPTION USING ERRCODE = 'SW003', MESSAGE = format(
            'invalid cron "%s": field 3 (day-of-month): no selected day exists in the selected months, '
            'so it would never fire', src);
    END IF;
END $$;

-- The values one field of a valid expression selects (f: 1 minute .. 5 day-of-week,
-- where 7 is read as 0, Sunday), for cron_fires_at. The expression must have passed
-- validate_cron: this reads it without checking it again.
CREATE OR REPLACE FUNCTION scrinalia.cron_field_values(p_field text, p_f integer)
RETURNS integer[]
LANGUAGE plpgsql IMMUTABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    lows constant int[] := ARRAY[0, 0, 1, 1, 0];
    highs constant int[] := ARRAY[59, 23, 31, 12, 7];
    month_names constant text[] := ARRAY['JAN','FEB','MAR','APR','MAY','JUN','JUL','AUG','SEP','OCT','NOV','DEC'];
    day_names constant text[] := ARRAY['SUN','MON','TUE','WED','THU','FRI','SAT'];
    item_re constant text :=
        '^(?:(\*)|([0-9]{1,2}|[A-Za-z]{3})(?:-([0-9]{1,2}|[A-Za-z]{3}))?)(?:/([0-9]{1,2}))?$';
    item text;
    m text[];
    lo int;
    hi int;
    v int;
    out int[] := '{}';
BEGIN
    FOREACH item IN ARRAY string_to_array(p_field, ',') LOOP
        m := regexp_match(item, item_re);
        IF m[1] IS NOT NULL THEN
            lo := lows[p_f]; hi := highs[p_f];
        ELSE
            lo := CASE WHEN m[2] ~ '^[0-9]' THEN m[2]::int
                       WHEN p_f = 4 THEN array_position(month_names, upper(m[2]))
                       ELSE array_position(day_names, upper(m[2])) - 1 END;
            hi := CASE WHEN m[3] IS NULL THEN CASE WHEN m[4] IS NULL THEN lo ELSE highs[p_f] END
                       WHEN m[3] ~ '^[0-9]' THEN m[3]::int
                       WHEN p_f = 4 THEN array_position(month_names, upper(m[3]))
                       ELSE array_position(day_names, upper(m[3])) - 1 END;
        END IF;
        FOR v IN lo..hi BY coalesce(m[4]::int, 1) LOOP
            out := out || CASE WHEN p_f = 5 AND v = 7 THEN 0 ELSE v END;
        END LOOP;
    END LOOP;
    RETURN out;
END $$;

-- Is p_at an instant at which (p_cron, p_zone) fires, by the rules of docs/cron.md?
-- The twin of scrinalia_workers.cron's next_occurrence: the fields are read on the
-- zone's wall clock, the day fields by the Vixie rule (AND when either starts with
-- '*', else OR); a matching wall time that a spring-forward gap skips fires once, at
-- the first instant after the gap; in a fall-back fold only the first pass fires,
-- unless the hour field is exactly '*'. tests/cron/test_cron_fires_at.py pins that
-- the two agree. Raises SW003 for an invalid cron; a zone PostgreSQL does not know
-- raises its own error.
CREATE OR REPLACE FUNCTION scrinalia.cron_fires_at(p_cron text, p_zone text, p_at timestamptz)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    f text[];
    mins int[]; hours int[]; doms int[]; months int[]; dows int[];
    day_and boolean;
    w timestamp;
    shift interval;
    g timestamp;
BEGIN
    IF p_cron IS NULL OR p_zone IS NULL OR p_at IS NULL OR NOT isfinite(p_at) THEN
        RETURN false;
    END IF;
    PERFORM scrinalia.validate_cron(p_cron);
    f := regexp_split_to_array(btrim(p_cron, E' \t'), E'[ \t]+');
    mins := scrinalia.cron_field_values(f[1], 1);
    hours := scrinalia.cron_field_values(f[2], 2);
    doms := scrinalia.cron_field_values(f[3], 3);
    months := scrinalia.cron_field_values(f[4], 4);
    dows := scrinalia.cron_field_values(f[5], 5);
    day_and := left(f[3], 1) = '*' OR left(f[5], 1) = '*';
    w := p_at AT TIME ZONE p_zone;

    -- an ordinary firing: a matching wall minute, and not the second pass of a fold
    -- (the same wall time an offset-shift earlier) unless the hour field is '*'
    IF date_trunc('minute', w) = w
       AND extract(minute FROM w)::int = ANY (mins) AND extract(hour FROM w)::int = ANY (hours)
       AND extract(month FROM w)::int = ANY (months)
       AND ((extract(day FROM w)::int = ANY (doms)) AND (extract(dow FROM w)::int = ANY (dows))
            OR NOT day_and AND ((extract(day FROM w)::int = ANY (doms)) OR (extract(dow FROM w)::int = ANY (dows)))) THEN
        IF f[2] = '*' THEN
            RETURN true;
        END IF;
        -- (a fold's shift, seen from three hours before: wider than any real one)
        shift := ((p_at - interval '3 hours') AT TIME ZONE p_zone) - (p_at - interval '3 hours') AT TIME ZONE 'UTC'
                 - (w - p_at AT TIME ZONE 'UTC');
        IF shift <= interval '0' OR ((p_at - shift) AT TIME ZONE p_zone) <> w THEN
            RETURN true;
        END IF;
    END IF;

    -- the first instant after a spring-forward gap: fires when a wall minute of the gap
    -- matches (the offset one second earlier is smaller by the gap's width)
    shift := (w - p_at AT TIME ZONE 'UTC')
             - (((p_at - interval '1 second') AT TIME ZONE p_zone) - (p_at - interval '1 second') AT TIME ZONE 'UTC');
    IF shift > interval '0' THEN
        FOR g IN SELECT generate_series(date_trunc('minute', w - shift)
                                        + CASE WHEN date_trunc('minute', w - shift) < w - shift
                                               THEN interval '1 minute' ELSE interval '0' END,
                                        w - interval '1 microsecond', interval '1 minute') LOOP
            IF extract(minute FROM g)::int = ANY (mins) AND extract(hour FROM g)::int = ANY (hours)
               AND extract(month FROM g)::int = ANY (months)
               AND ((extract(day FROM g)::int = ANY (doms)) AND (extract(dow FROM g)::int = ANY (dows))
                    OR NOT day_and AND ((extract(day FROM g)::int = ANY (doms)) OR (extract(dow FROM g)::int = ANY (dows)))) THEN
                RETURN true;
            END IF;
        END LOOP;
    END IF;
    RETURN false;
END $$;

-- The bit masks (rows of archive_cron_masks) of the given crons, each distinct one
-- once. p_valid: the caller validated them (write_schedules' callers); else each is
-- validated here and an invalid one left out (the tick then checks its schedules the
-- slow way, and refuses them). Set-based: each distinct field is parsed once, for
-- however many crons. The crons are as archive_worker_schedules stores them.
-- (Its own columns, not the table's row type: migration 0007's rollback drops the
-- table while this code is still installed.)
CREATE OR REPLACE FUNCTION scrinalia.cron_masks_of(p_crons text[], p_valid boolean)
RETURNS TABLE (cron text, minutes bigint, hours integer, doms bigint, months integer, dows integer,
               day_and boolean, hour_star boolean)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
DECLARE
    todo text[];
    ok text[] := '{}';
    c text;
BEGIN
    SELECT coalesce(array_agg(DISTINCT x), '{}') INTO todo FROM unnest(p_crons) x WHERE x IS NOT NULL;
    IF p_valid THEN
        ok := todo;
    ELSE
        FOREACH c IN ARRAY todo LOOP
            BEGIN
                PERFORM scrinalia.validate_cron(c);
                ok := ok || c;
            EXCEPTION WHEN SQLSTATE 'SW003' THEN
                NULL;
            END;
        END LOOP;
    END IF;
    IF cardinality(ok) = 0 THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH c AS (
        SELECT x AS cron, regexp_split_to_array(btrim(x, E' \t'), E'[ \t]+') AS f FROM unnest(ok) x
    ), fields AS (
        SELECT DISTINCT k, c.f[k] AS field FROM c, generate_series(1, 5) k
    ), masks AS (
        SELECT fd.k, fd.field,
               (SELECT coalesce(bit_or(1::bigint << v), 0) FROM unnest(scrinalia.cron_field_values(fd.field, fd.k)) v)
                   AS mask
          FROM fields fd
    )
    SELECT c.cron, m1.mask, m2.mask::int, m3.mask, m4.mask::int, m5.mask::int,
           left(c.f[3], 1) = '*' OR left(c.f[5], 1) = '*', c.f[2] = '*'
      FROM c
      JOIN masks m1 ON m1.k = 1 AND m1.field = c.f[1]
      JOIN masks m2 ON m2.k = 2 AND m2.field = c.f[2]
      JOIN masks m3 ON m3.k = 3 AND m3.field = c.f[3]
      JOIN masks m4 ON m4.k = 4 AND m4.field = c.f[4]
      JOIN masks m5 ON m5.k = 5 AND m5.field = c.f[5];
END $$;

-- The masks of the given crons that archive_cron_masks lacks, stored (cron_masks_of).
CREATE OR REPLACE FUNCTION scrinalia.store_cron_masks(p_crons text[], p_valid boolean)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
BEGIN
    INSERT INTO scrinalia.archive_cron_masks
    SELECT * FROM scrinalia.cron_masks_of(
        ARRAY(SELECT x FROM unnest(p_crons) x
               WHERE NOT EXISTS (SELECT FROM scrinalia.archive_cron_masks m WHERE m.cron = x)), p_valid)
    ON CONFLICT DO NOTHING;
END $$;


-- The masks of the crons already stored, when migrate installs this code.
SELECT scrinalia.store_cron_masks(array_agg(DISTINCT s.cron), false) FROM scrinalia.archive_worker_schedules s;
