-- What an operator's stack reads: the current alerts in words, and the metrics that
-- prometheus-postgres-exporter exposes (monitoring/queries.yaml). All for the reader
-- group; labels are worker names, statuses and triggers, never run ids.
-- Each sets jit = off: the planner costs their per-worker index probes far above what
-- they do, so with a large ledger every call was JIT-compiled first, and compiling
-- took many times longer than the query. The two the exporter reads per worker are
-- PL/pgSQL: its session plans them once, where an SQL function's body is planned at
-- every call.

-- The latest finished scheduled period of each scheduled worker that has one (see
-- latest_finished_periods_of() in 86_tallies.sql for the definition): as the fold last
-- kept it, and computed afresh for the workers whose runs changed since. Only those
-- that ended in one of p_statuses (NULL: every one): the tallies filtered before they
-- are joined, so that the alerts' few failed periods are not found among every
-- worker's.
CREATE OR REPLACE FUNCTION scrinalia.latest_periods_ended(p_statuses scrinalia.run_status[])
RETURNS TABLE (worker_name text, scheduled_for timestamptz, run_ids bigint[], attempts integer,
               last_status scrinalia.run_status, last_error text, finished_at timestamptz)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, scrinalia, pg_temp
SET jit = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    -- (the workers whose periods changed since the last fold: 86_tallies.sql)
    WITH changed AS (
        SELECT DISTINCT d.worker_name
          FROM scrinalia.run_tally_delta e CROSS JOIN LATERAL unnest(e.worker_names) AS d(worker_name)
         WHERE e.period)
    SELECT t.worker_name, t.scheduled_for, t.run_ids, t.attempts, t.last_status, t.last_error, t.finished_at
      FROM scrinalia.archive_worker_schedules s
      JOIN scrinalia.latest_period_tally t ON t.worker_name = s.worker_name
     WHERE NOT EXISTS (SELECT 1 FROM changed c WHERE c.worker_name = s.worker_name)
       AND (p_statuses IS NULL OR t.last_status = ANY (p_statuses))
    UNION ALL
    SELECT f.worker_name, f.scheduled_for, f.run_ids, f.attempts, f.last_status, f.last_error, f.finished_at
      FROM scrinalia.latest_finished_periods_of(ARRAY(
            SELECT s.worker_name FROM scrinalia.archive_worker_schedules s
              JOIN changed c ON c.worker_name = s.worker_name)) f
     WHERE p_statuses IS NULL OR f.last_status = ANY (p_statuses);
END
$$;

-- Every scheduled worker's latest finished period (latest_periods_ended, any status).
CREATE OR REPLACE FUNCTION scrinalia.latest_finished_periods()
RETURNS TABLE (worker_name text, scheduled_for timestamptz, run_ids bigint[], attempts integer,
               last_status scrinalia.run_status, last_error text, finished_at timestamptz)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, scrinalia, pg_temp
SET jit = off
AS $$
BEGIN
    RETURN QUERY SELECT * FROM scrinalia.latest_periods_ended(NULL);
END
$$;

-- The workers' alerts: work that stopped (current_alerts() and worker_metrics() read
-- these three, the one home of each rule). Each reads the live rows through a partial
-- index, never the history.

-- The RUNNING runs that have run overrun_alert_share() of their maximum run time, or
-- whose schedule has skipped overrun_alert_periods() periods in a row, the last while
-- they ran (the scheduler ends a run at its maximum run time: reap_expired_leases).
CREATE OR REPLACE FUNCTION scrinalia.overrunning_runs()
RETURNS TABLE (run_id bigint, worker_name text, runner text, started_at timestamptz, max_run_time interval,
               deadline_at timestamptz, skipped_periods bigint)
LANGUAGE sql STABLE
SET search_path = pg_catalog, scrinalia, pg_temp
SET jit = off
AS $$
    SELECT r.run_id, r.worker_name, r.lease_owner, r.started_at, l.max_run_time,
           r.started_at + l.max_run_time,
           CASE WHEN s.last_skipped_at >= r.started_at THEN s.skipped_count - s.skipped_count_at_enqueue ELSE 0 END
      FROM scrinalia.archive_worker_runs r
      LEFT JOIN scrinalia.archive_worker_limits wl ON wl.worker_name = r.worker_name
     CROSS JOIN LATERAL (SELECT coalesce(wl.max_run_time, scrinalia.default_max_run_time()) AS max_run_time) l
      LEFT JOIN scrinalia.archive_worker_schedules s ON s.worker_name = r.worker_name AND s.enabled
     WHERE r.status = 'RUNNING' AND isfinite(r.started_at)
       AND (r.started_at <= now() - l.max_run_time * scrinalia.overrun_alert_share()
            OR (s.last_skipped_at >= r.started_at
                AND s.skipped_count - s.skipped_count_at_enqueue >= scrinalia.overrun_alert_periods()))
$$;

-- The one starved rule: an enabled schedule whose last starved_alert_periods() periods
-- (or more) were all skipped. Inlined where it is called (one SQL expression): in
-- starved_schedules() it is the expression and predicate of ix_worker_schedules_skipping,
-- in worker_metrics() a test of the schedule row it reads anyway.
CREATE OR REPLACE FUNCTION scrinalia.schedule_is_starved(p_enabled boolean, p_skipped_count bigint,
                                                         p_skipped_count_at_enqueue bigint)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT p_enabled AND p_skipped_count OPERATOR(pg_catalog.>) p_skipped_count_at_enqueue
           AND p_skipped_count OPERATOR(pg_catalog.-) p_skipped_count_at_enqueue
               OPERATOR(pg_catalog.>=) scrinalia.starved_alert_periods()
$$;

-- The starved schedules (schedule_is_starved()), with what holds their worker's slot:
-- its QUEUED or RUNNING run, else the failed attempt owed a retry.
CREATE OR REPLACE FUNCTION scrinalia.starved_schedules()
RETURNS TABLE (worker_name text, cron text, timezone text, skipped_in_a_row bigint,
               last_enqueued_at timestamptz, last_skipped_at timestamptz, last_skip_reason text,
               slot_run_id bigint, slot_status scrinalia.run_status)
LANGUAGE sql STABLE
SET search_path = pg_catalog, scrinalia, pg_temp
SET jit = off
AS $$
    SELECT s.worker_name, s.cron, s.timezone, s.skipped_count - s.skipped_count_at_enqueue,
           s.last_enqueued_at, s.last_skipped_at, s.last_skip_reason,
           coalesce(a.run_id, o.run_id), coalesce(a.status, o.status)
      FROM scrinalia.archive_worker_schedules s
      LEFT JOIN scrinalia.archive_worker_runs a
             ON a.worker_name = s.worker_name AND a.status IN ('QUEUED', 'RUNNING')
      LEFT JOIN LATERAL (SELECT p.run_id, p.status FROM scrinalia.archive_worker_runs p
                          WHERE p.worker_name = s.worker_name AND p.retry_pending
                          ORDER BY p.run_id LIMIT 1) o ON true
     WHERE scrinalia.schedule_is_starved(s.enabled, s.skipped_count, s.skipped_count_at_enqueue)
$$;

-- A run no runner has claimed: QUEUED, and both created and claimable (not_before
-- passed) at p_cut or earlier, p_cut being now() - unclaimed_alert_after(). The one
-- rule of unclaimed_runs() and worker_metrics(), tested on a row each already reads:
-- one expression, no SET clause, inlined (every function and operator by its schema).
CREATE OR REPLACE FUNCTION scrinalia.run_is_unclaimed(p_status scrinalia.run_status, p_created_at timestamptz,
                                                      p_not_before timestamptz, p_cut timestamptz)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT p_status OPERATOR(pg_catalog.=) 'QUEUED'::scrinalia.run_status
           AND p_created_at OPERATOR(pg_catalog.<=) p_cut
           AND coalesce(p_not_before, p_created_at) OPERATOR(pg_catalog.<=) p_cut
$$;

-- The QUEUED runs claimable (not_before passed) for unclaimed_alert_after() or longer
-- that no runner has claimed. (Through ix_worker_runs_queued: created that long ago.)
CREATE OR REPLACE FUNCTION scrinalia.unclaimed_runs()
RETURNS TABLE (run_id bigint, worker_name text, trigger scrinalia.run_trigger, attempt integer,
               claimable_since timestamptz)
LANGUAGE sql STABLE
SET search_path = pg_catalog, scrinalia, pg_temp
SET jit = off
AS $$
    SELECT r.run_id, r.worker_name, r.trigger, r.attempt,
           greatest(coalesce(r.not_before, r.created_at), scrinalia.period_start())
      FROM scrinalia.archive_worker_runs r
     WHERE scrinalia.run_is_unclaimed(r.status, r.created_at, r.not_before, now() - scrinalia.unclaimed_alert_after())
$$;

-- skipped_count_at_enqueue (0011_run_limits) is kept by the writers that enqueue a
-- period, pause or resume (the tick, write_schedules, set_schedule_enabled), not by a
-- row trigger: a BEFORE UPDATE trigger locks the row before the update, and a row an
-- open enqueue holds FOR KEY SHARE then got a multixact for its xmax, which hid that
-- transaction from scheduler_blockers() (health no longer named it). The trigger of
-- earlier installs of this release goes.
DROP TRIGGER IF EXISTS schedule_enqueued ON scrinalia.archive_worker_schedules;

-- The alerts of now, one row each, in words an operator acts on. kind is one of
-- FAILED_AFTER_ALL_ATTEMPTS, SCHEDULE_OVERDUE, SCHEDULE_SET_ASIDE, LEASE_REAPED,
-- SCHEDULER_UNHEALTHY, INSTANT_REPAIRED (55_repair.sql: a next_run_at or a retry's
-- not_before no cron or policy could produce, repaired; a lease too long is reaped
-- and is a LEASE_REAPED), and the workers' work that stopped: RUN_OVERRUNNING,
-- SCHEDULE_STARVED, RUN_UNCLAIMED, RUN_TIMED_OUT (a run ended at its maximum run time,
-- for timed_out_alert_window()), and a runner's: RUNNER_STUCK (38_runner_stalls.sql,
-- worker_name NULL, the workers named in the words). No row: nothing to do.
-- p_words false: message NULL. announce_alerts() sends no words, and with many alerts
-- (a runner down under a full queue) formatting them was much of its check. (A
-- parameter, not a second function around this one: the rows of a set-returning
-- function are stored once more by each function they pass through.)
CREATE OR REPLACE FUNCTION scrinalia.current_alerts(p_words boolean DEFAULT true)
RETURNS TABLE (kind text, worker_name text, since timestamptz, run_ids bigint[], message text)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
SET jit = off
AS $$
    SELECT 'SCHEDULER_UNHEALTHY', NULL::text,
           coalesce(h.oldest_overdue_since, h.heartbeat_at), NULL::bigint[],
           CASE WHEN p_words THEN 'scheduling is not happening: ' || h.reason END
      FROM scrinalia.scheduler_health() h
     WHERE NOT h.healthy
    UNION ALL
    SELECT 'FAILED_AFTER_ALL_ATTEMPTS', p.worker_name, p.finished_at, p.run_ids,
           CASE WHEN p_words THEN format('the %s period of %s ended %s after %s attempt(s) (runs %s): %s',
                  to_char(p.scheduled_for AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI"Z"'), p.worker_name,
                  p.last_status, p.attempts, array_to_string(p.run_ids, ', '),
                  coalesce(left(split_part(p.last_error, E'\n', 1), 200), 'no error text')) END
      FROM scrinalia.latest_periods_ended(ARRAY['FAILED', 'INTERRUPTED']::scrinalia.run_status[]) p
    UNION ALL
    SELECT 'SCHEDULE_OVERDUE', s.worker_name, coalesce(s.next_run_at, s.updated_at), NULL,
           CASE WHEN p_words THEN format('the schedule of %s (%s, %s) was due at %s and has not been handled for %s: is a scheduler running?',
                  s.worker_name, s.cron, s.timezone, coalesce(s.next_run_at::text, 'arming'),
                  -- (a hand-written -infinity: overdue for ever, not an error that hides every alert)
                  coalesce(date_trunc('second', CASE WHEN isfinite(coalesce(s.next_run_at, s.updated_at))
                                                THEN now() - coalesce(s.next_run_at, s.updated_at) END)::text,
                           'ever')) END
      FROM scrinalia.overdue_schedules() s
    UNION ALL
    SELECT 'SCHEDULE_SET_ASIDE', s.worker_name, s.arm_error_since, NULL,
           CASE WHEN p_words THEN format('the scheduler cannot compute the schedule of %s (%s, %s): %s; fix it with put_schedule (next try %s)',
                  s.worker_name, s.cron, s.timezone, s.arm_error, s.arm_retry_at) END
      FROM scrinalia.archive_worker_schedules s
     WHERE s.enabled AND s.arm_error IS NOT NULL
    UNION ALL
    SELECT 'LEASE_REAPED', r.worker_name, r.finished_at, ARRAY[r.run_id],
           CASE WHEN p_words THEN format('run #%s of %s was interrupted: %s; did runner %s die?', r.run_id, r.worker_name,
                  r.error, coalesce(r.lease_owner, '?')) END
      FROM scrinalia.archive_worker_runs r
     WHERE r.error_fingerprint = 'lease-expired' AND r.finished_at > now() - scrinalia.reaped_alert_window()
    UNION ALL
    SELECT 'INSTANT_REPAIRED', s.worker_name, s.last_skipped_at, NULL,
           CASE WHEN p_words THEN format('the schedule of %s (%s, %s): %s; was the clock ahead, or was it written by hand?',
                  s.worker_name, s.cron, s.timezone, s.last_skip_reason) END
      FROM scrinalia.archive_worker_schedules s
     WHERE s.last_skipped_at > now() - scrinalia.repair_alert_window()
       AND s.last_skip_reason LIKE 'instant repaired: %'
    UNION ALL
    SELECT 'INSTANT_REPAIRED', r.worker_name, r.not_before, ARRAY[r.run_id],
           CASE WHEN p_words THEN format('run #%s of %s: %s; was the clock ahead, or was it written by hand?', r.run_id, r.worker_name,
                  r.error) END
      FROM scrinalia.archive_worker_runs r
     WHERE r.status IN ('QUEUED', 'RUNNING') AND r.error_fingerprint = 'not-before-beyond-policy'
    UNION ALL
    SELECT 'RUN_OVERRUNNING', o.worker_name, o.started_at, ARRAY[o.run_id],
           CASE WHEN p_words THEN format('run #%s of %s has been RUNNING for %s on runner %s%s; its maximum run time is %s, at %s the scheduler interrupts it: look at its handler (the runner''s log), or cancel it (scrinalia-workers cancel %s)',
                  o.run_id, o.worker_name, date_trunc('second', now() - o.started_at), coalesce(o.runner, '?'),
                  CASE WHEN o.skipped_periods > 0
                       THEN format(', and its schedule has skipped %s period(s) in a row', o.skipped_periods)
                       ELSE '' END,
                  o.max_run_time, o.deadline_at, o.run_id) END
      FROM scrinalia.overrunning_runs() o
    UNION ALL
    SELECT 'SCHEDULE_STARVED', s.worker_name, s.last_enqueued_at,
           CASE WHEN s.slot_run_id IS NOT NULL THEN ARRAY[s.slot_run_id] END,
           CASE WHEN p_words THEN format('the last %s periods of %s (%s, %s) were all skipped, the latest at %s (%s): %s',
                  s.skipped_in_a_row, s.worker_name, s.cron, s.timezone, s.last_skipped_at,
                  coalesce(s.last_skip_reason, 'no reason kept'),
                  CASE WHEN s.slot_run_id IS NULL THEN 'its slot is free now, the next period runs'
                       WHEN s.slot_status = 'RUNNING'
                       THEN format('run #%s holds its slot, still running: let it end or cancel it (scrinalia-workers cancel %s)',
                                   s.slot_run_id, s.slot_run_id)
                       WHEN s.slot_status = 'QUEUED'
                       THEN format('run #%s holds its slot, queued: is a runner claiming it? (or cancel it: scrinalia-workers cancel %s)',
                                   s.slot_run_id, s.slot_run_id)
                       ELSE format('run #%s holds its slot, owed its retry: is a scheduler running?', s.slot_run_id) END) END
      FROM scrinalia.starved_schedules() s
    UNION ALL
    SELECT 'RUN_UNCLAIMED', u.worker_name, u.claimable_since, ARRAY[u.run_id],
           CASE WHEN p_words THEN format('run #%s of %s (%s%s) has been claimable since %s and no runner has claimed it: is a runner running with a handler for %s (its --workers, its login)?',
                  u.run_id, u.worker_name, u.trigger,
                  CASE WHEN u.trigger = 'SCHEDULE' THEN format(' attempt %s/%s', u.attempt, scrinalia.max_attempts()) ELSE '' END,
                  u.claimable_since, u.worker_name) END
      FROM scrinalia.unclaimed_runs() u
    UNION ALL
    SELECT 'RUN_TIMED_OUT', r.worker_name, r.finished_at, ARRAY[r.run_id],
           CASE WHEN p_words THEN format('run #%s of %s was interrupted: it %s%s; make its handler finish sooner, or raise the worker''s limit (scrinalia.set_max_run_time, the owner)',
                  r.run_id, r.worker_name, r.error,
                  CASE WHEN r.retry_pending THEN ' (its period is retried)' ELSE '' END) END
      FROM scrinalia.archive_worker_runs r
     WHERE r.error_fingerprint = 'max-run-time' AND r.finished_at > now() - scrinalia.timed_out_alert_window()
    UNION ALL
    SELECT 'RUNNER_STUCK', NULL, s.stuck_since, s.run_ids,
           CASE WHEN p_words THEN CASE s.state
                WHEN 'stuck'
                THEN format('runner %s (login %s): all %s of its handler threads have been held since %s by runs told to stop (%s, of %s: cancelled, past their maximum run time, or their lease lost) whose handlers do not return; it exits at %s unless one does, for its supervisor to start a fresh one: make those handlers stop when told (docs/handlers.md, context.check())',
                            s.runner, s.login, s.threads, s.stuck_since, array_to_string(s.run_ids, ', '),
                            coalesce(array_to_string(s.worker_names, ', '), '?'), s.exits_at)
                WHEN 'exited'
                THEN format('runner %s (login %s) exited at %s: all %s of its handler threads were held since %s by runs told to stop (%s, of %s) whose handlers did not return; is its supervisor restarting it (compose restart:, systemd Restart=)? Make those handlers stop when told (docs/handlers.md, context.check())',
                            s.runner, s.login, s.exited_at, s.threads, s.stuck_since, array_to_string(s.run_ids, ', '),
                            coalesce(array_to_string(s.worker_names, ', '), '?'))
                ELSE format('runner %s (login %s) was to exit at %s, all %s of its handler threads held since %s by runs told to stop (%s, of %s), and has not said a word since: it was killed or its host lost, or it hangs; is its supervisor restarting it? Make those handlers stop when told (docs/handlers.md, context.check())',
                            s.runner, s.login, s.exits_at, s.threads, s.stuck_since, array_to_string(s.run_ids, ', '),
                            coalesce(array_to_string(s.worker_names, ', '), '?')) END END
      FROM scrinalia.runner_stalls() s
$$;

-- Pushed alerts, for the scheduler's pass: every new alert of current_alerts() is sent
-- once with NOTIFY on the channel scrinalia_alerts (delivered at the commit), its
-- payload JSON naming it only: {"kind", "worker", "since", "run_ids" (at most
-- max_alert_run_ids()), "run_ids_total"}, never its words (any login that may connect
-- can LISTEN: the words are current_alerts()'s, for the reader group). An alert is its
-- kind, its worker and its identity: the first of its run ids, else its since (a
-- starved schedule: its last enqueue, whatever run holds its slot; the scheduler's
-- health: none, one alert while unhealthy). announced_alerts keeps what was sent; a row
-- goes when its alert clears, so one that comes back is sent again, and the table
-- holds at most the current alerts. current_alerts() is computed at most every
-- alert_check_interval() (the last check kept in scheduler_chores), not at every pass.
-- Returns how many alerts it sent; NULL when it did not check.
CREATE OR REPLACE FUNCTION scrinalia.announce_alerts()
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
SET jit = off
AS $$
DECLARE
    sent integer;
    old_timeout text := current_setting('lock_timeout');
BEGIN
    PERFORM scrinalia.check_scheduler_caller('announce_alerts');
    -- (a session holding a row of these tables fails the check, and the next pass makes
    -- it: the ticks are not held up)
    PERFORM set_config('lock_timeout', scrinalia.chore_lock_timeout(), true);
    -- (a last check in the future, a clock that went back, does not hold a check back)
    UPDATE scrinalia.scheduler_chores SET alerts_checked_at = now()
     WHERE alerts_checked_at IS NULL OR alerts_checked_at <= now() - scrinalia.alert_check_interval()
        OR alerts_checked_at > now();
    IF NOT FOUND THEN
        PERFORM set_config('lock_timeout', old_timeout, true);
        RETURN NULL;
    END IF;
    -- The history's tallies folded first (86_tallies.sql; skipped while another session
    -- folds): what current_alerts() reads of the periods, and every reader's
    -- current_alerts() and status after it, then reads the tallies, not the deltas of
    -- every run since the last scrape (none, where no exporter scrapes).
    PERFORM scrinalia.fold_tallies();
    -- One pass over the alerts of now and those announced (a hash full join): the new
    -- ones and the cleared ones. With many alerts standing (a runner down under a full
    -- queue), a sort of the alerts and a probe of the table for each cost most of a
    -- check. An alert found twice (the same kind, worker and identity) is sent once.
    WITH now_alerts AS (
        SELECT a.kind, coalesce(a.worker_name, '') AS worker_name,
               CASE WHEN a.kind = 'SCHEDULER_UNHEALTHY' THEN ''
                    WHEN a.kind = 'SCHEDULE_STARVED' OR a.run_ids IS NULL
                    -- (the epoch: the same text whatever the session's TimeZone and DateStyle)
                    THEN coalesce(extract(epoch FROM a.since)::text, '')
                    ELSE a.run_ids[1]::text END AS identity,
               a.since, a.run_ids
          FROM scrinalia.current_alerts(false) a
    ), diff AS MATERIALIZED (
        SELECT n.kind, n.worker_name, n.identity, n.since, n.run_ids,
               s.kind AS cleared_kind, s.worker_name AS cleared_worker, s.identity AS cleared_identity
          FROM now_alerts n
          FULL JOIN scrinalia.announced_alerts s
                 ON s.kind = n.kind AND s.worker_name = n.worker_name AND s.identity = n.identity
         WHERE n.kind IS NULL OR s.kind IS NULL
    ), fresh AS MATERIALIZED (
        SELECT DISTINCT ON (d.kind, d.worker_name, d.identity) d.kind, d.worker_name, d.identity, d.since, d.run_ids
          FROM diff d
         WHERE d.kind IS NOT NULL
         ORDER BY d.kind, d.worker_name, d.identity
    ), cleared AS (
        DELETE FROM scrinalia.announced_alerts s
         USING diff d
         WHERE s.kind = d.cleared_kind AND s.worker_name = d.cleared_worker AND s.identity = d.cleared_identity
    ), kept AS (
        -- (ON CONFLICT: a row committed meanwhile)
        INSERT INTO scrinalia.announced_alerts (kind, worker_name, identity)
        SELECT f.kind, f.worker_name, f.identity FROM fresh f
        ON CONFLICT DO NOTHING
        RETURNING kind, worker_name, identity
    )
    SELECT count(pg_notify('scrinalia_alerts',
                           json_build_object('kind', n.kind, 'worker', nullif(n.worker_name, ''), 'since', n.since,
                                             'run_ids', n.run_ids[1:scrinalia.max_alert_run_ids()],
                                             'run_ids_total', coalesce(cardinality(n.run_ids), 0))::text))
      INTO sent
      FROM kept k
      JOIN fresh n ON n.kind = k.kind AND n.worker_name = k.worker_name AND n.identity = k.identity;
    PERFORM set_config('lock_timeout', old_timeout, true);
    RETURN sent;
END
$$;

-- 0.5 grew worker_metrics() by the workers' alerts (the exporter names the columns it
-- reads).
SELECT pg_temp.drop_when_result_lacks('scrinalia.worker_metrics()', 'slot_run_id');

-- Per worker: what prometheus-postgres-exporter exposes as gauges and counters. The
-- workers' alerts (overrunning_runs(), schedule_is_starved(), run_is_unclaimed()) as 1/0,
-- with the run that holds the slot (slot_run_id: the QUEUED or RUNNING run, else the
-- attempt owed a retry), a value, never a label.
CREATE OR REPLACE FUNCTION scrinalia.worker_metrics()
RETURNS TABLE (worker_name text, scheduled integer, paused integer, overdue integer, set_aside integer,
               failed_after_all_attempts integer, retries_created bigint, periods_skipped bigint,
               last_lateness_seconds double precision, queue_pending bigint, queue_processed bigint,
               oldest_claimable_wait_seconds double precision,
               max_run_time_seconds double precision, running_seconds double precision,
               overrunning integer, skipped_in_a_row bigint, starved integer, unclaimed integer,
               slot_run_id bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
SET jit = off
SET work_mem = '64MB'  -- (a hash of every worker in one batch)
AS $$
#variable_conflict use_column
DECLARE
    -- (read from the settings once, not for every schedule)
    overdue_cut timestamptz := now() - scrinalia.overdue_grace();
    -- (most workers have no limit of their own: converted once, not for each of them)
    default_max_seconds double precision := date_part('epoch', scrinalia.default_max_run_time());
    unclaimed_cut timestamptz := now() - scrinalia.unclaimed_alert_after();
BEGIN
    PERFORM scrinalia.fold_tallies();
    -- Set-based, no probe per worker: the tallies of 86_tallies.sql for the history, the
    -- live rows (one slot per worker) grouped once. Each worker's row is joined to the
    -- three tables with a row for most workers, and to one row of what only some have
    -- (x: the units, the deltas not folded yet, the slot, the owed retry, a limit, the
    -- run alerts), those few sets put together first: joined one by one, every worker's
    -- row went through a join, or a hashed subplan, for each of them. The schedule
    -- alerts are tests of the schedule's row (schedule_is_overdue(), schedule_is_starved()):
    -- a set of them would read every schedule again. date_part, not
    -- extract: a double at once, not a numeric converted (a hundred thousand a call).
    RETURN QUERY
    -- (the workers whose periods changed since the last fold: 86_tallies.sql)
    WITH changed AS (
        SELECT DISTINCT d.worker_name
          FROM scrinalia.run_tally_delta e CROSS JOIN LATERAL unnest(e.worker_names) AS d(worker_name)
         WHERE e.period)
    SELECT w.worker_name,
           (s.worker_name IS NOT NULL)::int,
           coalesce((NOT s.enabled)::int, 0),
           coalesce(scrinalia.schedule_is_overdue(s.enabled, s.arm_error, s.next_run_at, s.updated_at,
                                                  overdue_cut)::int, 0),
           coalesce((s.enabled AND s.arm_error IS NOT NULL)::int, 0),
           -- (latest_finished_periods() inlined: as tallied, or afresh for a changed worker)
           coalesce((CASE WHEN s.worker_name IS NULL THEN NULL
                          WHEN x.changed THEN x.changed_status
                          ELSE pt.last_status END IN ('FAILED', 'INTERRUPTED'))::int, 0),
           -- (the finished ones tallied, the deltas not folded yet, the live one: attempt > 1)
           coalesce(rt.retries, 0) + coalesce(x.retries_pending, 0) + coalesce((x.attempt > 1)::int, 0),
           coalesce(s.skipped_count, 0),
           -- (the tick's last run: tallied with the latest finished period when it is that
           -- period's attempt 1, as it mostly is; else read from the run, a probe for the
           -- few whose last run is live, gone, or changed since the fold)
           CASE WHEN s.last_run_id = pt.run_ids[1] AND pt.lateness_seconds IS NOT NULL
                     AND NOT coalesce(x.changed, false)
                THEN pt.lateness_seconds
                WHEN s.last_run_id IS NOT NULL
                THEN (SELECT scrinalia.lateness_seconds(r.created_at, r.scheduled_for)
                        FROM scrinalia.archive_worker_runs r WHERE r.run_id = s.last_run_id AND r.attempt = 1)
                END,
           coalesce(x.pending, 0), coalesce(x.processed, 0),
           x.wait,
           coalesce(date_part('epoch', x.max_run_time), default_max_seconds),
           CASE WHEN x.status = 'RUNNING' AND isfinite(x.started_at)
                THEN date_part('epoch', now() - x.started_at) END,
           coalesce(x.overrunning::int, 0),
           CASE WHEN s.enabled THEN s.skipped_count - s.skipped_count_at_enqueue ELSE 0 END,
           coalesce(scrinalia.schedule_is_starved(s.enabled, s.skipped_count, s.skipped_count_at_enqueue)::int, 0),
           coalesce(x.unclaimed::int, 0),
           coalesce(x.run_id, x.owed_run_id)
      FROM scrinalia.archive_workers w
      LEFT JOIN scrinalia.archive_worker_schedules s ON s.worker_name = w.worker_name
      LEFT JOIN scrinalia.latest_period_tally pt ON pt.worker_name = w.worker_name
      LEFT JOIN scrinalia.retry_tally rt ON rt.worker_name = w.worker_name
      LEFT JOIN (
        SELECT worker_name, q.pending, q.processed, ch.worker_name IS NOT NULL AS changed,
               pf.last_status AS changed_status, rd.retries AS retries_pending,
               a.run_id, a.status, a.started_at, a.attempt, a.wait, ow.run_id AS owed_run_id, wl.max_run_time,
               ov.worker_name IS NOT NULL AS overrunning, a.unclaimed
          -- (each at most one row a worker: one full join after another, by the name)
          FROM (SELECT u.worker_name, count(*) FILTER (WHERE u.processed_at IS NULL) AS pending,
                       count(*) FILTER (WHERE u.processed_at IS NOT NULL) AS processed
                  FROM scrinalia.archive_worker_units u GROUP BY u.worker_name) q
          FULL JOIN changed ch USING (worker_name)
          -- (not called when no worker changed: the usual case, after a fold)
          FULL JOIN (SELECT p.worker_name, p.last_status
                       FROM scrinalia.latest_finished_periods_of(ARRAY(SELECT c.worker_name FROM changed c)) p
                      WHERE EXISTS (SELECT FROM changed)) pf USING (worker_name)
          FULL JOIN (SELECT d.worker_name, sum(e.runs) AS retries
                       FROM scrinalia.run_tally_delta e CROSS JOIN LATERAL unnest(e.worker_names) AS d(worker_name)
                      WHERE e.retry AND e.runs <> 0
                      GROUP BY d.worker_name) rd USING (worker_name)
          -- (the slot: the live row, one a worker (uq_worker_run_active), and the owed
          -- retries. Its wait when QUEUED and claimable: a hand-written -infinity counts
          -- from period_start(): old, and no error; a future one, +infinity included,
          -- from now(): no wait yet. Whether it is unclaimed, unclaimed_runs()'s rule on
          -- the row read here: not a second read of the QUEUED runs, hashed again)
          FULL JOIN (SELECT r.worker_name, r.run_id, r.status, r.started_at, r.attempt,
                            CASE WHEN r.status = 'QUEUED' AND (r.not_before IS NULL OR r.not_before <= now())
                                 THEN date_part('epoch', now() - least(greatest(coalesce(r.not_before, r.created_at),
                                                                                 scrinalia.period_start()), now()))
                                 END AS wait,
                            scrinalia.run_is_unclaimed(r.status, r.created_at, r.not_before, unclaimed_cut) AS unclaimed
                       FROM scrinalia.archive_worker_runs r
                      WHERE r.status IN ('QUEUED', 'RUNNING')) a USING (worker_name)
          FULL JOIN (SELECT r.worker_name, min(r.run_id) AS run_id FROM scrinalia.archive_worker_runs r
                      WHERE r.retry_pending GROUP BY r.worker_name) ow USING (worker_name)
          FULL JOIN scrinalia.archive_worker_limits wl USING (worker_name)
          FULL JOIN (SELECT o.worker_name FROM scrinalia.overrunning_runs() o) ov USING (worker_name)
      ) x ON x.worker_name = w.worker_name;
END
$$;

-- The deltas not folded yet, per (worker, status, trigger). A function, so that a
-- view reading it is planned without the delta table's size: after a large fold its
-- statistics still count the deleted rows until a vacuum, and a plan that costly would
-- be compiled (jit) at every scrape meanwhile. It runs in its caller's snapshot.
CREATE OR REPLACE FUNCTION scrinalia.pending_run_counts()
RETURNS TABLE (worker_name text, status scrinalia.run_status, trigger scrinalia.run_trigger, runs bigint)
LANGUAGE sql STABLE SECURITY DEFINER
ROWS 100
SET search_path = pg_catalog, scrinalia, pg_temp
SET jit = off
AS $$
    SELECT d.worker_name, e.status, e.trigger, sum(e.runs)::bigint
      FROM scrinalia.run_tally_delta e CROSS JOIN LATERAL unnest(e.worker_names) AS d(worker_name)
     WHERE e.runs <> 0
     GROUP BY 1, 2, 3
$$;

-- Per (worker, status, trigger): how many runs the ledger holds (prune_runs lowers it):
-- the finished ones tallied, the deltas not folded yet, the live ones (86_tallies.sql),
-- in one snapshot. A view, so that the exporter's scrape of a row per key and worker
-- streams them out: a function puts every row in a tuplestore first, a copy of the
-- whole answer. It does not fold (worker_metrics(), in the same scrape, does, and
-- run_counts() below): exact either way, only the pending deltas cost more to read.
-- (security_barrier: a caller's condition is not evaluated before the view's own, on
-- rows the view leaves out.)
CREATE OR REPLACE VIEW scrinalia.ledger_counts WITH (security_barrier) AS
-- (a finished key, tallied or pending, is never a live one: three disjoint parts)
WITH pending AS MATERIALIZED (
    SELECT p.worker_name, p.status, p.trigger, p.runs FROM scrinalia.pending_run_counts() p
)
-- the tallies, one scan, the pending keys left out: when nothing is pending (after a
-- fold: the usual case) decided once, in the statement's snapshot, before any probe
SELECT t.worker_name, t.status::text AS status, t.trigger::text AS trigger, t.runs
  FROM scrinalia.run_tally t
 WHERE t.runs > 0
   AND (NOT (SELECT EXISTS (SELECT FROM pending))
        -- (NOT IN: one hash of the pending keys, never NULL here)
        OR (t.worker_name, t.status, t.trigger) NOT IN (SELECT p.worker_name, p.status, p.trigger
                                                          FROM pending p WHERE p.worker_name IS NOT NULL))
UNION ALL
SELECT p.worker_name, p.status::text, p.trigger::text, p.runs + coalesce(t.runs, 0)
  FROM pending p
  LEFT JOIN scrinalia.run_tally t
         ON t.worker_name = p.worker_name AND t.status = p.status AND t.trigger = p.trigger
 WHERE p.runs + coalesce(t.runs, 0) > 0
UNION ALL
SELECT r.worker_name, r.status::text, r.trigger::text, count(*)
  FROM scrinalia.archive_worker_runs r
 WHERE r.status IN ('QUEUED', 'RUNNING')
 GROUP BY 1, 2, 3;

-- ledger_counts with the deltas folded first (the readers that fold keep them few).
CREATE OR REPLACE FUNCTION scrinalia.run_counts()
RETURNS TABLE (worker_name text, status text, trigger text, runs bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
SET jit = off
SET work_mem = '64MB'
AS $$
#variable_conflict use_column
BEGIN
    PERFORM scrinalia.fold_tallies();
    -- (the rows go through a tuplestore: kept in memory, work_mem, not spilled to a file)
    RETURN QUERY SELECT c.worker_name, c.status, c.trigger, c.runs FROM scrinalia.ledger_counts c;
END
$$;

-- The scheduler as one row of numbers (1 = true).
CREATE OR REPLACE FUNCTION scrinalia.scheduler_metrics()
RETURNS TABLE (healthy integer, lock_held integer, holder_is_scheduler integer,
               heartbeat_timestamp_seconds double precision, heartbeat_age_seconds double precision,
               overdue_schedules integer, set_aside_schedules integer, ticks bigint,
               leases_reaped_last_hour bigint)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, scrinalia, pg_temp
SET jit = off
AS $$
    SELECT h.healthy::int, (h.holder_pid IS NOT NULL)::int, coalesce(h.holder_is_scheduler, false)::int,
           extract(epoch FROM h.heartbeat_at)::float8, extract(epoch FROM h.heartbeat_age)::float8,
           h.overdue_schedules, h.set_aside_schedules,
           (SELECT st.ticks FROM scrinalia.scheduler_state st),
           (SELECT count(*) FROM scrinalia.archive_worker_runs r
             WHERE r.error_fingerprint = 'lease-expired' AND r.finished_at > now() - scrinalia.reaped_alert_window())
      FROM scrinalia.scheduler_health() h
$$;
