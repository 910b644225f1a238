-- Schedules (ADR 0015): one per worker, validated in SQL so that a put from psql is
-- as safe as one from the CLI, and armed by the scheduler, which computes cron
-- occurrences in the zone.
-- Errors: SW003 invalid cron (20_cron.sql), SW004 invalid time zone, SW005 no schedule.

CREATE OR REPLACE FUNCTION scrinalia.validate_timezone(p_timezone text)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_timezone IS NULL OR p_timezone = '' OR length(p_timezone) > 64
       OR p_timezone ~ '^(posix|right)/' OR p_timezone IN ('localtime', 'posixrules', 'Factory')
       OR NOT EXISTS (SELECT 1 FROM pg_catalog.pg_timezone_names WHERE name = p_timezone) THEN
        RAISE EXCEPTION USING ERRCODE = 'SW004',
            MESSAGE = format('invalid time zone %s: not an IANA zone name',
                             coalesce(quote_literal(left(p_timezone, 100)), 'NULL')),
            HINT = 'use a name such as Europe/Berlin or America/Sao_Paulo (SELECT name FROM pg_timezone_names)';
    END IF;
    RETURN p_timezone;
END $$;

CREATE OR REPLACE FUNCTION scrinalia.default_timezone()
RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
    SELECT coalesce((SELECT value FROM scrinalia.settings WHERE name = 'DEFAULT_TIMEZONE'), 'UTC')
$$;

CREATE OR REPLACE FUNCTION scrinalia.set_default_timezone(p_timezone text)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
BEGIN
    INSERT INTO scrinalia.settings (name, value)
    VALUES ('DEFAULT_TIMEZONE', scrinalia.validate_timezone(p_timezone))
    ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value, updated_at = now();
    RETURN p_timezone;
END $$;

CREATE OR REPLACE FUNCTION scrinalia.get_schedule(p_worker_name text)
RETURNS SETOF scrinalia.archive_worker_schedules
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
    SELECT * FROM scrinalia.archive_worker_schedules WHERE worker_name = p_worker_name
$$;

-- Creates or replaces the worker's schedule. The stored next_run_at is cleared
-- (to be armed by the scheduler) when the cron or zone changes or the schedule is
-- re-enabled, and kept otherwise, so that editing the request alone neither skips
-- nor repeats a period.
CREATE OR REPLACE FUNCTION scrinalia.put_schedule(p_worker_name text, p_cron text, p_timezone text DEFAULT NULL,
                                       p_request jsonb DEFAULT '{}', p_enabled boolean DEFAULT true,
                                       p_updated_by text DEFAULT NULL, p_updated_by_user_id bigint DEFAULT NULL)
RETURNS scrinalia.archive_worker_schedules
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
DECLARE
    cron text;
    tz text;
    req jsonb;
    s scrinalia.archive_worker_schedules;
BEGIN
    PERFORM scrinalia.require_worker(p_worker_name);
    PERFORM scrinalia.validate_cron(p_cron);
    cron := regexp_replace(btrim(p_cron, E' \t'), E'[ \t]+', ' ', 'g');
    tz := scrinalia.validate_timezone(coalesce(p_timezone, scrinalia.default_timezone()));
    req := scrinalia.validate_request(p_worker_name, p_request);
    IF p_enabled IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SW002', MESSAGE = 'enabled must be true or false, not NULL';
    END IF;
    INSERT INTO scrinalia.archive_worker_schedules AS o
           (worker_name, enabled, cron, timezone, request, updated_by, updated_by_user_id)
    VALUES (p_worker_name, p_enabled, cron, tz, req, scrinalia.check_actor('updated_by', p_updated_by),
            p_updated_by_user_id)
    ON CONFLICT (worker_name) DO UPDATE
       SET enabled = EXCLUDED.enabled, cron = EXCLUDED.cron, timezone = EXCLUDED.timezone,
           request = EXCLUDED.request, updated_by = EXCLUDED.updated_by,
           updated_by_user_id = EXCLUDED.updated_by_user_id, updated_at = now(),
           next_run_at = CASE WHEN o.enabled AND EXCLUDED.enabled
                               AND o.cron = EXCLUDED.cron AND o.timezone = EXCLUDED.timezone
                              THEN o.next_run_at END,
           -- a new cron or zone deserves a fresh attempt at computing it
           arm_error = NULL, arm_error_since = NULL, arm_retry_at = NULL
    RETURNING * INTO s;
    PERFORM pg_notify('scrinalia_scheduler', 'schedule');
    RETURN s;
END $$;

CREATE OR REPLACE FUNCTION scrinalia.raise_no_schedule(p_worker_name text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'SW005',
        MESSAGE = format('worker %s has no schedule', coalesce(quote_literal(left(p_worker_name, 100)), 'NULL'));
END $$;

-- Pauses (enabled = false: no due schedule at all) or resumes; resuming re-arms from
-- the cron, so the periods missed while paused are not caught up.
CREATE OR REPLACE FUNCTION scrinalia.set_schedule_enabled(p_worker_name text, p_enabled boolean,
                                               p_updated_by text DEFAULT NULL)
RETURNS scrinalia.archive_worker_schedules
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
DECLARE s scrinalia.archive_worker_schedules;
BEGIN
    PERFORM scrinalia.require_worker(p_worker_name);
    IF p_enabled IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SW002', MESSAGE = 'enabled must be true or false, not NULL';
    END IF;
    UPDATE scrinalia.archive_worker_schedules o
       SET enabled = p_enabled, updated_by = scrinalia.check_actor('updated_by', p_updated_by), updated_at = now(),
           next_run_at = CASE WHEN o.enabled AND p_enabled THEN o.next_run_at END,
           arm_error = NULL, arm_error_since = NULL, arm_retry_at = NULL
     WHERE worker_name = p_worker_name
    RETURNING * INTO s;
    IF NOT FOUND THEN
        PERFORM scrinalia.raise_no_schedule(p_worker_name);
    END IF;
    PERFORM pg_notify('scrinalia_scheduler', 'schedule');
    RETURN s;
END $$;

CREATE OR REPLACE FUNCTION scrinalia.delete_schedule(p_worker_name text)
RETURNS scrinalia.archive_worker_schedules
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
DECLARE s scrinalia.archive_worker_schedules;
BEGIN
    PERFORM scrinalia.require_worker(p_worker_name);
    DELETE FROM scrinalia.archive_worker_schedules WHERE worker_name = p_worker_name
    RETURNING * INTO s;
    IF NOT FOUND THEN
        PERFORM scrinalia.raise_no_schedule(p_worker_name);
    END IF;
    PERFORM pg_notify('scrinalia_scheduler', 'schedule');
    RETURN s;
END $$;
