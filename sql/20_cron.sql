-- Cron validation in SQL, so that a schedule saved from psql is held to the same
-- strict five-field language as one saved through the shim (docs/cron.md).
-- This is the twin of scrinalia_workers/cron.py: same grammar, same order of checks,
-- same messages; tests/cron/test_cron_sql_agreement.py pins that they agree.
-- Then the parsed form (bit masks, cron_masks_of) and the one matcher of a wall time
-- against it (cron_masks_match), which cron_fires_at, the tick (50_tick.sql) and the
-- previews (41_previews.sql) share. None is SECURITY DEFINER: a group granted
-- validate_cron or cron_fires_at is granted what they call too (90_roles.sql).
-- Error: SW003, the message names the field (1-based) when there is one.

-- The grammar's constants, their one home: per field (1 minute .. 5 day-of-week) its
-- name and range, the month and day names (a day's value is its index - 1, SUN 0), the
-- days of each month at most (February 29), the pattern of one list item, and how
-- the fields are separated. One row. A set-returning SQL function with no SET clause
-- (it names nothing a search_path could change, and its E'' strings read the same
-- whatever standard_conforming_strings says): the planner inlines it into the
-- statement that reads it, as constants.
CREATE OR REPLACE FUNCTION scrinalia.cron_grammar()
RETURNS TABLE (field_names text[], lows integer[], highs integer[], month_names text[], day_names text[],
               month_days integer[], item_pattern text, blanks text, separator text)
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT ARRAY['minute', 'hour', 'day-of-month', 'month', 'day-of-week'],
           ARRAY[0, 0, 1, 1, 0],
           ARRAY[59, 23, 31, 12, 7],
           ARRAY['JAN', 'FEB', 'MAR', 'APR', 'MAY', 'JUN', 'JUL', 'AUG', 'SEP', 'OCT', 'NOV', 'DEC'],
           ARRAY['SUN', 'MON', 'TUE', 'WED', 'THU', 'FRI', 'SAT'],
           ARRAY[31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31],
           E'^(?:(\\*)|([0-9]{1,2}|[A-Za-z]{3})(?:-([0-9]{1,2}|[A-Za-z]{3}))?)(?:/([0-9]{1,2}))?$',
           E' \t',
           E'[ \t]+'
$$;

CREATE OR REPLACE FUNCTION scrinalia.validate_cron(expr text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    field_names text[];
    lows int[];
    highs int[];
    month_names text[];
    day_names text[];
    month_days int[];
    item_re text;
    blanks text;
    separator text;
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
    SELECT g.field_names, g.lows, g.highs, g.month_names, g.day_names, g.month_days, g.item_pattern, g.blanks,
           g.separator
      INTO field_names, lows, highs, month_names, day_names, month_days, item_re, blanks, separator
      FROM scrinalia.cron_grammar() g;
    IF expr IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SW003', MESSAGE = 'invalid cron: expression is missing';
    END IF;
    IF length(expr) > scrinalia.max_cron_length() THEN
        RAISE EXCEPTION USING ERRCODE = 'SW003',
            MESSAGE = format('invalid cron: expression is longer than %s characters', scrinalia.max_cron_length());
    END IF;
    src := btrim(expr, blanks);
    IF src = '' THEN
        RAISE EXCEPTION USING ERRCODE = 'SW003', MESSAGE = 'invalid cron: expression is empty';
    END IF;
    fields := regexp_split_to_array(src, separator);
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
-- where 7 is read as 0, Sunday) as a bit mask: bit v set for value v. The one parser
-- of a field (cron_masks, cron_masks_of, cron_field_values). The expression must have
-- passed validate_cron: this reads it without checking it again.
CREATE OR REPLACE FUNCTION scrinalia.cron_field_mask(p_field text, p_f integer)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    lows int[];
    highs int[];
    month_names text[];
    day_names text[];
    item_re text;
    item text;
    m text[];
    lo int;
    hi int;
    v int;
    mask bigint := 0;
BEGIN
    SELECT g.lows, g.highs, g.month_names, g.day_names, g.item_pattern
      INTO lows, highs, month_names, day_names, item_re
      FROM scrinalia.cron_grammar() g;
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
            mask := mask | (1::bigint << CASE WHEN p_f = 5 AND v = 7 THEN 0 ELSE v END);
        END LOOP;
    END LOOP;
    RETURN mask;
END $$;

-- The values one field of a valid expression selects (cron_field_mask), ascending.
CREATE OR REPLACE FUNCTION scrinalia.cron_field_values(p_field text, p_f integer)
RETURNS integer[]
LANGUAGE plpgsql IMMUTABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    mask bigint := scrinalia.cron_field_mask(p_field, p_f);
    v int;
    out int[] := '{}';
BEGIN
    FOR v IN 0..63 LOOP
        IF (mask >> v) & 1 = 1 THEN
            out := out || v;
        END IF;
    END LOOP;
    RETURN out;
END $$;

-- The fields of a valid cron and what its text alone says of them: day_and, the day
-- fields are ANDed, not ORed (the Vixie rule: when either starts with '*'); hour_star,
-- the hour field is exactly '*' (a fall-back fold's hour fires twice). One row, by
-- one SQL query the planner inlines (no SET clause: every name qualified, as in
-- cron_masks_match), for cron_masks and cron_masks_of. (OFFSET 0: the text is split
-- once, not again for each field read.)
CREATE OR REPLACE FUNCTION scrinalia.cron_fields(p_cron text)
RETURNS TABLE (fields text[], day_and boolean, hour_star boolean)
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT s.f,
           pg_catalog.left(s.f[3], 1) OPERATOR(pg_catalog.=) '*'
               OR pg_catalog.left(s.f[5], 1) OPERATOR(pg_catalog.=) '*',
           s.f[2] OPERATOR(pg_catalog.=) '*'
      FROM (SELECT pg_catalog.regexp_split_to_array(pg_catalog.btrim(p_cron, g.blanks), g.separator) AS f
              FROM scrinalia.cron_grammar() g
            OFFSET 0) s
$$;

-- The bit masks of one valid cron (one row), what cron_masks_match reads: its fields'
-- masks (cron_field_mask), day_and and hour_star (cron_fields). For cron_fires_at and
-- the previews, one cron at a time; cron_masks_of computes the same for many at once.
CREATE OR REPLACE FUNCTION scrinalia.cron_masks(p_cron text)
RETURNS TABLE (minutes bigint, hours integer, doms bigint, months integer, dows integer, day_and boolean,
               hour_star boolean)
LANGUAGE plpgsql IMMUTABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    f text[];
BEGIN
    SELECT x.fields, x.day_and, x.hour_star INTO f, day_and, hour_star FROM scrinalia.cron_fields(p_cron) x;
    minutes := scrinalia.cron_field_mask(f[1], 1);
    hours := scrinalia.cron_field_mask(f[2], 2);
    doms := scrinalia.cron_field_mask(f[3], 3);
    months := scrinalia.cron_field_mask(f[4], 4);
    dows := scrinalia.cron_field_mask(f[5], 5);
    RETURN NEXT;
END $$;

-- The bit masks (rows of archive_cron_masks) of the given crons, each distinct one
-- once, as cron_masks computes them one by one. p_valid: the caller validated them
-- (write_schedules' callers); else each is validated here and an invalid one left
-- out (the tick then checks its schedules the slow way, and refuses them).
-- Set-based: each distinct field is parsed once, for however many crons. The crons
-- are as archive_worker_schedules stores them.
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
        SELECT u.x AS cron, x.fields AS f, x.day_and, x.hour_star
          FROM unnest(ok) u(x), scrinalia.cron_fields(u.x) x
    ), fields AS (
        SELECT DISTINCT k, c.f[k] AS field FROM c, generate_series(1, 5) k
    ), masks AS (
        SELECT fd.k, fd.field, scrinalia.cron_field_mask(fd.field, fd.k) AS mask FROM fields fd
    )
    SELECT c.cron, m1.mask, m2.mask::int, m3.mask, m4.mask::int, m5.mask::int, c.day_and, c.hour_star
      FROM c
      JOIN masks m1 ON m1.k = 1 AND m1.field = c.f[1]
      JOIN masks m2 ON m2.k = 2 AND m2.field = c.f[2]
      JOIN masks m3 ON m3.k = 3 AND m3.field = c.f[3]
      JOIN masks m4 ON m4.k = 4 AND m4.field = c.f[4]
      JOIN masks m5 ON m5.k = 5 AND m5.field = c.f[5];
END $$;

-- Whether a cron, as its masks (cron_masks, cron_masks_of), selects the wall time
-- p_local: a whole minute whose minute, hour and month bits are set, and whose day by
-- the Vixie rule: day-of-month and day-of-week both when day_and, else either. The one
-- matcher: cron_fires_at, the tick's check of each next instant and its catch-up check
-- (50_tick.sql), and the previews (41_previews.sql) read wall times with it; the DST
-- rules (which instant a wall time is) are theirs. One expression, no SET clause and
-- not STRICT: the planner inlines it into the statement that calls it, as if written
-- there (a call per row would cost more than the check). Without a pinned search_path
-- it names every function and operator by its schema, so that no caller's path can
-- change what it means (tests/sql/test_roles.py checks the inlined functions for it).
-- Each test reads: (mask >> field of the wall time) & 1 = 1; the cheapest first, as
-- most wall times fail the minute's.
CREATE OR REPLACE FUNCTION scrinalia.cron_masks_match(p_minutes bigint, p_hours integer, p_doms bigint,
                                                      p_months integer, p_dows integer, p_day_and boolean,
                                                      p_local timestamp)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT (p_minutes OPERATOR(pg_catalog.>>) pg_catalog.date_part('minute', p_local)::integer)
           OPERATOR(pg_catalog.&) 1 OPERATOR(pg_catalog.=) 1
       AND (p_hours OPERATOR(pg_catalog.>>) pg_catalog.date_part('hour', p_local)::integer)
           OPERATOR(pg_catalog.&) 1 OPERATOR(pg_catalog.=) 1
       AND (p_months OPERATOR(pg_catalog.>>) pg_catalog.date_part('month', p_local)::integer)
           OPERATOR(pg_catalog.&) 1 OPERATOR(pg_catalog.=) 1
       AND CASE WHEN p_day_and
                THEN (p_doms OPERATOR(pg_catalog.>>) pg_catalog.date_part('day', p_local)::integer)
                         OPERATOR(pg_catalog.&) 1 OPERATOR(pg_catalog.=) 1
                     AND (p_dows OPERATOR(pg_catalog.>>) pg_catalog.date_part('dow', p_local)::integer)
                         OPERATOR(pg_catalog.&) 1 OPERATOR(pg_catalog.=) 1
                ELSE (p_doms OPERATOR(pg_catalog.>>) pg_catalog.date_part('day', p_local)::integer)
                         OPERATOR(pg_catalog.&) 1 OPERATOR(pg_catalog.=) 1
                     OR (p_dows OPERATOR(pg_catalog.>>) pg_catalog.date_part('dow', p_local)::integer)
                         OPERATOR(pg_catalog.&) 1 OPERATOR(pg_catalog.=) 1 END
       AND pg_catalog.date_trunc('minute', p_local) OPERATOR(pg_catalog.=) p_local
$$;

-- Is p_at an instant at which (p_cron, p_zone) fires, by the rules of docs/cron.md?
-- The twin of scrinalia_workers.cron's next_occurrence: the fields are read on the
-- zone's wall clock (cron_masks_match); a matching wall time that a spring-forward gap
-- skips fires once, at the first instant after the gap; in a fall-back fold only the
-- first pass fires, unless the hour field is exactly '*'. tests/cron/test_cron_fires_at.py
-- pins that the two agree. Raises SW003 for an invalid cron; a zone PostgreSQL does
-- not know raises its own error.
CREATE OR REPLACE FUNCTION scrinalia.cron_fires_at(p_cron text, p_zone text, p_at timestamptz)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    mins bigint; hours int; doms bigint; months int; dows int;
    day_and boolean;
    hour_star boolean;
    w timestamp;
    shift interval;
BEGIN
    IF p_cron IS NULL OR p_zone IS NULL OR p_at IS NULL OR NOT isfinite(p_at) THEN
        RETURN false;
    END IF;
    PERFORM scrinalia.validate_cron(p_cron);
    SELECT c.minutes, c.hours, c.doms, c.months, c.dows, c.day_and, c.hour_star
      INTO mins, hours, doms, months, dows, day_and, hour_star
      FROM scrinalia.cron_masks(p_cron) c;
    w := p_at AT TIME ZONE p_zone;

    -- an ordinary firing: a matching wall minute, and not the second pass of a fold
    -- (the same wall time an offset-shift earlier) unless the hour field is '*'
    IF scrinalia.cron_masks_match(mins, hours, doms, months, dows, day_and, w) THEN
        IF hour_star THEN
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
    IF shift <= interval '0' THEN
        RETURN false;
    END IF;
    RETURN EXISTS (
        SELECT FROM generate_series(date_trunc('minute', w - shift)
                                    + CASE WHEN date_trunc('minute', w - shift) < w - shift
                                           THEN interval '1 minute' ELSE interval '0' END,
                                    w - interval '1 microsecond', interval '1 minute') AS g(wall)
         WHERE scrinalia.cron_masks_match(mins, hours, doms, months, dows, day_and, g.wall));
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
