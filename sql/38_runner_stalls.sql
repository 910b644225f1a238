-- A runner whose every handler thread is held by a run told to stop (cancelled, past its
-- maximum run time, its lease lost) and not returning: it logs `handlers stuck`, and
-- after its --grace exits 3 so that its supervisor starts a fresh one. It says the same
-- here, so that what an operator's stack reads sees it too (current_alerts()
-- RUNNER_STUCK, worker-independent; the exporter's scrinalia_runner_stall series).
-- One row per login and runner id, written by a runner login through these functions
-- only, and only for runs its runner id claimed; each login's rows are bounded apart
-- (max_runner_stalls()), and its rows past the alert window go at its next report.
-- A stall is stuck until the runner says it is over or that it exits; one whose exit
-- time passed by runner_stall_exit_slack() without a word is gone (killed, its host lost).
-- Errors: SW022 an invalid runner id, thread count, run ids (or runs this runner id did
-- not claim) or grace.

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
    foreign_runs bigint[];
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
    -- (a run keeps the runner that claimed it as its lease owner once ended: cancelled,
    -- timed out, reaped; only a release clears it, and a released run never started)
    SELECT array_agg(u.id ORDER BY u.id) INTO foreign_runs
      FROM unnest(runs) AS u(id)
     WHERE NOT EXISTS (SELECT FROM scrinalia.archive_worker_runs r
                        WHERE r.run_id = u.id AND r.lease_owner = p_runner);
    IF foreign_runs IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SW022',
            MESSAGE = format('report_runner_stuck: runner %s did not claim run(s) %s',
                             p_runner, array_to_string(foreign_runs[1:20], ', '));
    END IF;
    DELETE FROM scrinalia.runner_stalls s
     WHERE s.login = session_user
       AND greatest(s.reported_at, s.exits_at) < now() - scrinalia.runner_stall_alert_window();
    INSERT INTO scrinalia.runner_stalls AS s (login, runner, run_ids, threads, stuck_since, exits_at)
    VALUES (session_user, p_runner, runs, p_threads, now(), now() + p_grace)
    ON CONFLICT (login, runner) DO UPDATE
       SET run_ids = excluded.run_ids, threads = excluded.threads, stuck_since = excluded.stuck_since,
           exits_at = excluded.exits_at, exited_at = NULL, reported_at = now();
    DELETE FROM scrinalia.runner_stalls s
     WHERE s.login = session_user
       AND s.runner IN (SELECT o.runner FROM scrinalia.runner_stalls o
                         WHERE o.login = session_user
                         ORDER BY o.reported_at DESC, o.runner OFFSET scrinalia.max_runner_stalls());
END $$;

-- A handler of the runner returned: it is no longer stuck (its row goes). The owner may
-- clear any login's.
CREATE OR REPLACE FUNCTION scrinalia.clear_runner_stuck(p_runner text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
BEGIN
    PERFORM scrinalia.check_runner(p_runner, scrinalia.min_lease());
    DELETE FROM scrinalia.runner_stalls s
     WHERE s.runner = p_runner AND (s.login = session_user OR scrinalia.session_is_owner());
END $$;

-- The runner exits (3) stuck: its row stays, said exited, until the alert window ends.
CREATE OR REPLACE FUNCTION scrinalia.report_runner_stuck_exit(p_runner text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
BEGIN
    PERFORM scrinalia.check_runner(p_runner, scrinalia.min_lease());
    UPDATE scrinalia.runner_stalls s SET exited_at = now(), reported_at = now()
     WHERE s.runner = p_runner AND s.login = session_user;
END $$;

-- The stalls within the alert window (from the later of the last word and the exit
-- time), with the workers of their runs and their state: 'stuck' (the runner said so and
-- its exit time has not passed by runner_stall_exit_slack()), 'exited' (it said it
-- exits for it), 'gone' (its exit time passed without a word: killed, its host lost).
CREATE OR REPLACE FUNCTION scrinalia.runner_stalls()
RETURNS TABLE (runner text, login name, state text, run_ids bigint[], worker_names text[], threads integer,
               stuck_since timestamptz, exits_at timestamptz, exited_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
    SELECT s.runner, s.login,
           CASE WHEN s.exited_at IS NOT NULL THEN 'exited'
                WHEN s.exits_at + scrinalia.runner_stall_exit_slack() < now() THEN 'gone'
                ELSE 'stuck' END,
           s.run_ids,
           ARRAY(SELECT DISTINCT r.worker_name FROM scrinalia.archive_worker_runs r
                  WHERE r.run_id = ANY (s.run_ids) ORDER BY 1),
           s.threads, s.stuck_since, s.exits_at, s.exited_at
      FROM scrinalia.runner_stalls s
     WHERE greatest(s.reported_at, s.exits_at) >= now() - scrinalia.runner_stall_alert_window()
     ORDER BY s.stuck_since, s.runner, s.login
$$;

-- For the exporter (monitoring/queries.yaml scrinalia_runner_stalls), without the
-- runners' ids (a monitor login sees no lease owner): how many runners are stuck now,
-- the handler threads they hold, and how many exited stuck (or went without a word)
-- within the alert window.
CREATE OR REPLACE FUNCTION scrinalia.runner_stall_metrics()
RETURNS TABLE (stuck_runners integer, stuck_threads integer, exited_stuck_runners integer)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
AS $$
    SELECT (count(*) FILTER (WHERE s.state = 'stuck'))::integer,
           coalesce(sum(s.threads) FILTER (WHERE s.state = 'stuck'), 0)::integer,
           (count(*) FILTER (WHERE s.state <> 'stuck'))::integer
      FROM scrinalia.runner_stalls() s
$$;
