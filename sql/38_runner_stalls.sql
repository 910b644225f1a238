-- A runner whose every handler thread is held by a run told to stop (cancelled, past its
-- maximum run time, its lease lost) and not returning: it logs `handlers stuck`, and
-- after its --grace exits 3 so that its supervisor starts a fresh one. It says the same
-- here, so that what an operator's stack reads sees it too (current_alerts()
-- RUNNER_STUCK, worker-independent; the exporter's scrinalia_runner_stall series).
-- One row per runner id, written by a runner login through these functions only, each
-- row only by the login that wrote it (or the owner); rows older than
-- runner_stall_alert_window() go at the next report.
-- Errors: SW022 an invalid runner id, thread count, run ids or grace, or a runner id
-- whose stall another login reported.

-- The runner p_runner: every one of its p_threads handler threads holds one of the runs
-- p_run_ids, told to stop; it exits at now() + p_grace unless one returns.
CREATE OR REPLACE FUNCTION scrinalia.report_runner_stuck(p_runner text, p_run_ids bigint[], p_threads integer,
                                                         p_grace interval)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
DECLARE
    runs bigint[];
BEGIN
    PERFORM scrinalia.check_runner(p_runner, scrinalia.min_lease());  -- (the id's rule)
    IF p_threads IS NULL OR p_threads NOT BETWEEN 1 AND scrinalia.max_stall_threads() THEN
        RAISE EXCEPTION USING ERRCODE = 'SW022',
            MESSAGE = format('report_runner_stuck takes 1 to %s threads, not %s',
                             scrinalia.max_stall_threads(), coalesce(p_threads::text, 'NULL'));
    END IF;
    SELECT coalesce(array_agg(DISTINCT u.id ORDER BY u.id), '{}') INTO runs
      FROM unnest(p_run_ids) AS u(id) WHERE u.id IS NOT NULL;
    IF cardinality(runs) NOT BETWEEN 1 AND p_threads THEN
        RAISE EXCEPTION USING ERRCODE = 'SW022',
            MESSAGE = format('report_runner_stuck takes 1 to %s run ids (one per thread), not %s',
                             p_threads, cardinality(runs));
    END IF;
    IF p_grace IS NULL OR p_grace < interval '0' OR p_grace > interval '1 day' THEN
        RAISE EXCEPTION USING ERRCODE = 'SW022',
            MESSAGE = format('report_runner_stuck takes a grace of 0 to 1 day, not %s', coalesce(p_grace::text, 'NULL'));
    END IF;
    PERFORM scrinalia.check_stall_writer(p_runner);
    DELETE FROM scrinalia.runner_stalls s WHERE s.reported_at < now() - scrinalia.runner_stall_alert_window();
    INSERT INTO scrinalia.runner_stalls AS s (runner, run_ids, threads, stuck_since, exits_at)
    VALUES (p_runner, runs, p_threads, now(), now() + p_grace)
    ON CONFLICT (runner) DO UPDATE
       SET login = session_user, run_ids = excluded.run_ids, threads = excluded.threads,
           stuck_since = excluded.stuck_since, exits_at = excluded.exits_at, exited_at = NULL,
           reported_at = now();
    DELETE FROM scrinalia.runner_stalls s
     WHERE s.runner IN (SELECT o.runner FROM scrinalia.runner_stalls o
                         ORDER BY o.reported_at DESC, o.runner OFFSET scrinalia.max_runner_stalls());
END $$;

-- A handler of the runner returned: it is no longer stuck (its row goes).
CREATE OR REPLACE FUNCTION scrinalia.clear_runner_stuck(p_runner text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
BEGIN
    PERFORM scrinalia.check_runner(p_runner, scrinalia.min_lease());
    PERFORM scrinalia.check_stall_writer(p_runner);
    DELETE FROM scrinalia.runner_stalls s WHERE s.runner = p_runner;
END $$;

-- The runner exits (3) stuck: its row stays, said exited, until the alert window ends.
CREATE OR REPLACE FUNCTION scrinalia.report_runner_stuck_exit(p_runner text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
BEGIN
    PERFORM scrinalia.check_runner(p_runner, scrinalia.min_lease());
    PERFORM scrinalia.check_stall_writer(p_runner);
    UPDATE scrinalia.runner_stalls s SET exited_at = now(), reported_at = now() WHERE s.runner = p_runner;
END $$;

-- Raises SW022 when the runner's row was written by another login (the owner may write
-- any): a runner login reports its own runners' stalls, not another's away.
CREATE OR REPLACE FUNCTION scrinalia.check_stall_writer(p_runner text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
DECLARE
    writer name;
BEGIN
    SELECT s.login INTO writer FROM scrinalia.runner_stalls s WHERE s.runner = p_runner;
    IF FOUND AND writer <> session_user AND NOT scrinalia.session_is_owner() THEN
        RAISE EXCEPTION USING ERRCODE = 'SW022',
            MESSAGE = format('runner %s''s stall was reported by login %s, not %s', p_runner, writer, session_user),
            HINT = 'each runner login reports the stalls of its own runners';
    END IF;
END $$;

-- The stalls within the alert window, with the workers of their runs.
CREATE OR REPLACE FUNCTION scrinalia.runner_stalls()
RETURNS TABLE (runner text, login name, run_ids bigint[], worker_names text[], threads integer,
               stuck_since timestamptz, exits_at timestamptz, exited_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
    SELECT s.runner, s.login, s.run_ids,
           ARRAY(SELECT DISTINCT r.worker_name FROM scrinalia.archive_worker_runs r
                  WHERE r.run_id = ANY (s.run_ids) ORDER BY 1),
           s.threads, s.stuck_since, s.exits_at, s.exited_at
      FROM scrinalia.runner_stalls s
     WHERE s.reported_at >= now() - scrinalia.runner_stall_alert_window()
     ORDER BY s.stuck_since, s.runner
$$;

-- For the exporter (monitoring/queries.yaml scrinalia_runner_stalls), without the
-- runners' ids (a monitor login sees no lease owner): how many runners are stuck now,
-- the handler threads they hold, and how many exited stuck within the alert window.
CREATE OR REPLACE FUNCTION scrinalia.runner_stall_metrics()
RETURNS TABLE (stuck_runners integer, stuck_threads integer, exited_stuck_runners integer)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
    SELECT (count(*) FILTER (WHERE s.exited_at IS NULL))::integer,
           coalesce(sum(s.threads) FILTER (WHERE s.exited_at IS NULL), 0)::integer,
           (count(*) FILTER (WHERE s.exited_at IS NOT NULL))::integer
      FROM scrinalia.runner_stalls s
     WHERE s.reported_at >= now() - scrinalia.runner_stall_alert_window()
$$;
