-- What `status` shows of a large install: the agenda's totals counted on the server, the
-- workers an operator looks at first, and the busiest queues; the rest is paged (the
-- catalogue by name, `status --all`, the web view). After 88_alerts.sql: the alerts'
-- rules are their one home, read here.

-- The page size of agenda_focus() and busiest_queues(): raises 22023 unless it is 1 or more.
CREATE OR REPLACE FUNCTION scrinalia.check_page_limit(p_limit integer)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_limit IS NULL OR p_limit < 1 THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format('p_limit must be 1 or more, not %s', coalesce(p_limit::text, 'NULL'));
    END IF;
END $$;

-- The agenda's totals, one row: the workers, their schedules by state, and how many are
-- in each of agenda_focus()'s concerns (by the same rules; a worker may be in several).
CREATE OR REPLACE FUNCTION scrinalia.agenda_totals()
RETURNS TABLE (workers bigint, scheduled bigint, paused bigint, awaiting_arm bigint, overdue bigint,
               set_aside bigint, overrunning bigint, retry_owed bigint, starved bigint, unclaimed bigint,
               running bigint, queued bigint)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
SET jit = off
AS $$
    SELECT (SELECT count(*) FROM scrinalia.archive_workers),
           s.scheduled, s.paused, s.awaiting_arm,
           (SELECT count(*) FROM scrinalia.overdue_schedules()),
           s.set_aside,
           (SELECT count(*) FROM scrinalia.overrunning_runs()),
           (SELECT count(DISTINCT p.worker_name) FROM scrinalia.archive_worker_runs p WHERE p.retry_pending),
           (SELECT count(*) FROM scrinalia.starved_schedules()),
           (SELECT count(*) FROM scrinalia.unclaimed_runs()),
           a.running, a.queued
      FROM (SELECT count(*) AS scheduled,
                   count(*) FILTER (WHERE NOT enabled) AS paused,
                   count(*) FILTER (WHERE enabled AND next_run_at IS NULL AND arm_error IS NULL) AS awaiting_arm,
                   count(*) FILTER (WHERE enabled AND arm_error IS NOT NULL) AS set_aside
              FROM scrinalia.archive_worker_schedules) s,
           (SELECT count(*) FILTER (WHERE status = 'RUNNING') AS running,
                   count(*) FILTER (WHERE status = 'QUEUED') AS queued
              FROM scrinalia.archive_worker_runs WHERE status IN ('QUEUED', 'RUNNING')) a
$$;

-- The p_limit workers an operator looks at first, in this order, each under its first
-- concern: overdue (the longest overdue first), set aside, overrunning, retry owed,
-- starved, unclaimed, running (the longest running first), next (the next due first),
-- then every other worker by name. At most p_limit of each concern are read, each
-- through its index: a worker among the first p_limit overall is among the first
-- p_limit of its own concern. position counts from 1; the agenda's row is joined by name.
CREATE OR REPLACE FUNCTION scrinalia.agenda_focus(p_limit integer)
RETURNS TABLE ("position" integer, focus text, worker_name text)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
SET jit = off
ROWS 50
AS $$
#variable_conflict use_column
BEGIN
    PERFORM scrinalia.check_page_limit(p_limit);
    RETURN QUERY
    WITH concern AS (
        (SELECT 1 AS rank, 'overdue' AS focus, o.worker_name, coalesce(o.next_run_at, o.updated_at) AS at
           FROM scrinalia.overdue_schedules() o ORDER BY 4, 3 LIMIT p_limit)
        UNION ALL
        (SELECT 2, 'set aside', s.worker_name, s.arm_error_since FROM scrinalia.archive_worker_schedules s
          WHERE s.enabled AND s.arm_error IS NOT NULL ORDER BY 4, 3 LIMIT p_limit)
        UNION ALL
        (SELECT 3, 'overrunning', r.worker_name, r.started_at FROM scrinalia.overrunning_runs() r
          ORDER BY 4, 3 LIMIT p_limit)
        UNION ALL
        (SELECT 4, 'retry owed', p.worker_name, p.finished_at FROM scrinalia.archive_worker_runs p
          WHERE p.retry_pending ORDER BY 4, 3 LIMIT p_limit)
        UNION ALL
        (SELECT 5, 'starved', v.worker_name, v.last_enqueued_at FROM scrinalia.starved_schedules() v
          ORDER BY 4 NULLS FIRST, 3 LIMIT p_limit)
        UNION ALL
        (SELECT 6, 'unclaimed', u.worker_name, u.claimable_since FROM scrinalia.unclaimed_runs() u
          ORDER BY 4, 3 LIMIT p_limit)
        UNION ALL
        (SELECT 7, 'running', r.worker_name, r.started_at FROM scrinalia.archive_worker_runs r
          WHERE r.status = 'RUNNING' ORDER BY 4, 3 LIMIT p_limit)
        UNION ALL
        -- (ix_worker_schedules_due_order's order: the unarmed, NULL, are not next)
        (SELECT 8, 'next', s.worker_name, s.next_run_at FROM scrinalia.archive_worker_schedules s
          WHERE s.enabled AND s.next_run_at IS NOT NULL AND s.arm_error IS NULL
          ORDER BY s.next_run_at NULLS FIRST, s.worker_name LIMIT p_limit)
        UNION ALL
        (SELECT 9, 'other', w.worker_name, NULL::timestamptz FROM scrinalia.archive_workers w
          ORDER BY w.worker_name LIMIT p_limit)
    ), first_concern AS (
        SELECT DISTINCT ON (c.worker_name) c.rank, c.focus, c.worker_name, c.at
          FROM concern c ORDER BY c.worker_name, c.rank, c.at NULLS FIRST
    )
    SELECT (row_number() OVER (ORDER BY f.rank, f.at NULLS FIRST, f.worker_name))::integer,
           f.focus, f.worker_name
      FROM first_concern f
     ORDER BY f.rank, f.at NULLS FIRST, f.worker_name
     LIMIT p_limit;
END
$$;

-- The queues' totals, one row: the workers with units, and the units pending and processed.
CREATE OR REPLACE FUNCTION scrinalia.queue_totals()
RETURNS TABLE (workers_with_units bigint, pending bigint, processed bigint)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
SET jit = off
AS $$
    SELECT count(DISTINCT u.worker_name), count(*) FILTER (WHERE u.processed_at IS NULL),
           count(*) FILTER (WHERE u.processed_at IS NOT NULL)
      FROM scrinalia.archive_worker_units u
$$;

-- The p_limit workers with the most units pending (then processed, then by name), as
-- worker_queue_counters counts them; workers without units fill the page by name.
CREATE OR REPLACE FUNCTION scrinalia.busiest_queues(p_limit integer)
RETURNS TABLE (worker_name text, pending bigint, processed bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
SET jit = off
ROWS 50
AS $$
#variable_conflict use_column
BEGIN
    PERFORM scrinalia.check_page_limit(p_limit);
    RETURN QUERY
    SELECT q.worker_name, q.pending, q.processed
      FROM ((SELECT u.worker_name, count(*) FILTER (WHERE u.processed_at IS NULL) AS pending,
                    count(*) FILTER (WHERE u.processed_at IS NOT NULL) AS processed
               FROM scrinalia.archive_worker_units u GROUP BY u.worker_name
              ORDER BY 2 DESC, 3 DESC, 1 LIMIT p_limit)
            UNION ALL
            (SELECT w.worker_name, 0::bigint, 0::bigint FROM scrinalia.archive_workers w
              WHERE NOT EXISTS (SELECT FROM scrinalia.archive_worker_units u WHERE u.worker_name = w.worker_name)
              ORDER BY w.worker_name LIMIT p_limit)) q
     ORDER BY q.pending DESC, q.processed DESC, q.worker_name
     LIMIT p_limit;
END
$$;
