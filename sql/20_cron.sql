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
    IF length(expr) > 200 THEN
        RAISE EXCEPTION USING ERRCODE = 'SW003',
            MESSAGE = 'invalid cron: expression is longer than 200 characters';
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
