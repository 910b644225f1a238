-- The policy numbers and status sets, each with one home: every function, view and
-- the shim read them here (the table CHECKs in migrations/ restate them as facts).
-- A number a signature shows as a parameter default (claim_next's lease of 5 minutes,
-- due_schedules' limit) stays there: a signature cannot change in place.

-- ADR 0015: a scheduled period gets at most three attempts in all.
-- The small policy functions that run once per row of a claim, finish or tick are
-- PL/pgSQL: a SQL function with a SET clause cannot be inlined, so it is parsed and
-- planned again in every statement that calls it (~40 us a finish); PL/pgSQL keeps
-- its plan for the session (~1 us).
CREATE OR REPLACE FUNCTION scrinalia.max_attempts()
RETURNS integer
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN 3; END $$;

-- The statuses that hold the worker's one slot. The partial unique index
-- uq_worker_run_active (migrations/0001) states the same set as its predicate, and the
-- queries that must use that index spell it out as the index does.
CREATE OR REPLACE FUNCTION scrinalia.active_statuses()
RETURNS scrinalia.run_status[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT ARRAY['QUEUED', 'RUNNING']::scrinalia.run_status[] $$;

-- The statuses a run never leaves.
CREATE OR REPLACE FUNCTION scrinalia.terminal_statuses()
RETURNS scrinalia.run_status[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT ARRAY['SUCCEEDED', 'FAILED', 'INTERRUPTED', 'CANCELLED']::scrinalia.run_status[] $$;

-- The statuses a runner reports (finish, finish_runs): SW021 for any other.
CREATE OR REPLACE FUNCTION scrinalia.outcome_statuses()
RETURNS scrinalia.run_status[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT ARRAY['SUCCEEDED', 'FAILED', 'INTERRUPTED']::scrinalia.run_status[] $$;

-- Who did it (updated_by, requested_by, cancelled_by, the scheduler's name): free text
-- from the caller, at most this long. Longer is refused, never silently cut.
CREATE OR REPLACE FUNCTION scrinalia.max_actor_length()
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT 200 $$;

-- Returns p_value when it fits (NULL passes), else raises SW002 naming the argument.
CREATE OR REPLACE FUNCTION scrinalia.check_actor(p_argument text, p_value text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF length(p_value) > scrinalia.max_actor_length() THEN
        RAISE EXCEPTION USING ERRCODE = 'SW002',
            MESSAGE = pg_catalog.format('%s is %s characters long: at most %s',
                                        p_argument, length(p_value), scrinalia.max_actor_length());
    END IF;
    RETURN p_value;
END $$;

-- The calls that take parallel arrays: raises p_sqlstate with p_message unless every
-- array is there (its cardinality not NULL) and all have one length.
CREATE OR REPLACE FUNCTION scrinalia.check_array_lengths(p_sqlstate text, p_message text,
                                              p_cardinalities integer[])
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- an expression, not a query: the batch calls of the runner pass here at every call
    IF array_position(p_cardinalities, NULL) IS NOT NULL
       OR p_cardinalities <> array_fill(p_cardinalities[1], ARRAY[cardinality(p_cardinalities)]) THEN
        RAISE EXCEPTION USING ERRCODE = p_sqlstate, MESSAGE = p_message;
    END IF;
END $$;

-- The one way a problem returned by a check (unknown_worker, request_problem,
-- slot_busy, ...) is raised: its SQLSTATE, message, hint and detail; a batch call that
-- checks element by element (put_schedules, enqueue_runs) names the element and its
-- worker first ('schedule #3 (worker 'ocr'): ...'); p_i NULL names none.
CREATE OR REPLACE FUNCTION scrinalia.raise_problem(p_element text, p_i integer, p_worker text, p_sqlstate text,
                                                   p_message text, p_hint text, p_detail text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    msg text := p_message;
BEGIN
    IF p_i IS NOT NULL THEN
        msg := format('%s #%s%s: %s', p_element, p_i,
                      CASE WHEN p_worker IS NOT NULL
                           THEN format(' (worker %s)', quote_literal(left(p_worker, 100))) ELSE '' END,
                      msg);
    END IF;
    -- (an empty HINT or DETAIL would still reach the client, as an empty field)
    IF coalesce(p_hint, '') = '' AND coalesce(p_detail, '') = '' THEN
        RAISE EXCEPTION USING ERRCODE = p_sqlstate, MESSAGE = msg;
    ELSIF coalesce(p_detail, '') = '' THEN
        RAISE EXCEPTION USING ERRCODE = p_sqlstate, MESSAGE = msg, HINT = p_hint;
    ELSIF coalesce(p_hint, '') = '' THEN
        RAISE EXCEPTION USING ERRCODE = p_sqlstate, MESSAGE = msg, DETAIL = p_detail;
    END IF;
    RAISE EXCEPTION USING ERRCODE = p_sqlstate, MESSAGE = msg, HINT = p_hint, DETAIL = p_detail;
END $$;

-- raise_problem() with no detail: put_schedules' element errors, caught and raised again.
CREATE OR REPLACE FUNCTION scrinalia.raise_element_error(p_element text, p_i integer, p_worker text,
                                                          p_sqlstate text, p_message text, p_hint text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM scrinalia.raise_problem(p_element, p_i, p_worker, p_sqlstate, p_message, p_hint, NULL);
END $$;

-- A runner's lease (claim_next, claim_runs): at least this long...
CREATE OR REPLACE FUNCTION scrinalia.min_lease()
RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT interval '1 second' $$;

-- ...and at most this long.
CREATE OR REPLACE FUNCTION scrinalia.max_lease()
RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT interval '1 day' $$;

-- A runner id (the lease owner) is at most this many characters.
CREATE OR REPLACE FUNCTION scrinalia.max_runner_id_length()
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT 200 $$;

-- The largest request (its JSON text, in bytes) a run, a schedule or settings may carry.
CREATE OR REPLACE FUNCTION scrinalia.max_request_bytes()
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT 65536 $$;

-- The longest cron expression accepted (the shim's cron.MAX_LENGTH says the same).
CREATE OR REPLACE FUNCTION scrinalia.max_cron_length()
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT 200 $$;

-- The longest time zone name accepted (IANA's longest is about 30 characters).
CREATE OR REPLACE FUNCTION scrinalia.max_timezone_length()
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT 64 $$;

-- prune_runs keeps at least this much history, and deletes at most this many runs a batch.
CREATE OR REPLACE FUNCTION scrinalia.min_prune_age()
RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT interval '1 day' $$;

CREATE OR REPLACE FUNCTION scrinalia.max_prune_batch()
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT 1000000 $$;

-- The elements from which a batch function plans its statements with the batch's
-- values (a custom plan: hashes and scans sized for the batch) rather than with its
-- one kept plan made for a few (probes of an index per element).
CREATE OR REPLACE FUNCTION scrinalia.large_batch()
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT 100 $$;

-- How many runs one batch call (claim_runs, heartbeat_runs, finish_runs,
-- release_runs) takes, at most.
CREATE OR REPLACE FUNCTION scrinalia.max_claim_batch()
RETURNS integer
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN 1000; END $$;

-- What an outcome keeps of the runner's error text, and of its fingerprint, in
-- characters (the rest is cut: a runner's report is never refused for its length).
CREATE OR REPLACE FUNCTION scrinalia.max_error_length()
RETURNS integer
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN 10000; END $$;

CREATE OR REPLACE FUNCTION scrinalia.max_fingerprint_length()
RETURNS integer
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN 200; END $$;

-- Does a run in this state owe a retry? (ADR 0015: a SCHEDULE run that ended FAILED
-- or INTERRUPTED before its last attempt; never MANUAL/CLI, never CANCELLED.)
CREATE OR REPLACE FUNCTION scrinalia.owes_retry(p_trigger scrinalia.run_trigger, p_status scrinalia.run_status,
                                     p_attempt integer)
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN p_trigger = 'SCHEDULE' AND p_status IN ('FAILED', 'INTERRUPTED')
       AND p_attempt < scrinalia.max_attempts();
END $$;

-- The backoff before a retry (retry_delay): after attempt n, the base doubled n - 1
-- times, at most the cap, times 1 + a jitter drawn in [-retry_jitter(), retry_jitter()],
-- and never above the cap.
CREATE OR REPLACE FUNCTION scrinalia.retry_base_delay()
RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT interval '1 minute' $$;

CREATE OR REPLACE FUNCTION scrinalia.retry_max_delay()
RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT interval '30 minutes' $$;

CREATE OR REPLACE FUNCTION scrinalia.retry_jitter()
RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT 0.2::double precision $$;

-- How long a schedule the scheduler could not compute waits before the next try.
CREATE OR REPLACE FUNCTION scrinalia.arm_retry_interval()
RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT interval '1 minute' $$;

-- What a set-aside schedule keeps of the error that set it aside, in characters.
CREATE OR REPLACE FUNCTION scrinalia.max_arm_error_length()
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT 1000 $$;

-- The scheduler writes its heartbeat at most this often (it passes more often).
CREATE OR REPLACE FUNCTION scrinalia.heartbeat_interval()
RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT interval '1 second' $$;

-- How long the scheduler holding the lock may leave its sessions waiting before the
-- server ends them: its lock session idle (idle_session_timeout, PostgreSQL 14+;
-- limit_scheduler_lock_session()), its work session idle inside a transaction
-- (idle_in_transaction_session_timeout; limit_scheduler_work_session()). A frozen holder
-- frees the lock, and any schedule row its tick holds, this soon after its last
-- statement, with no privilege to end a session. A live holder sends a statement far
-- more often, from a thread of its own (scheduler.sessions.KEEPALIVE_EVERY), so a long
-- pass does not end them.
CREATE OR REPLACE FUNCTION scrinalia.holder_idle_limit()
RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT interval '5 seconds' $$;

-- An interval from scrinalia.settings (set by the owner), at least 1 second; the
-- default when the row is missing or does not read as an interval.
CREATE OR REPLACE FUNCTION scrinalia.setting_interval(p_name text, p_default interval)
RETURNS interval
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE v interval;
BEGIN
    BEGIN
        SELECT st.value::interval INTO v FROM scrinalia.settings st WHERE st.name = p_name;
    EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow OR interval_field_overflow THEN
        v := NULL;
    END;
    RETURN greatest(coalesce(v, p_default), interval '1 second');
END $$;

-- A lock holder whose heartbeat is older than this is stale: unhealthy, and a standby
-- may end its session. SCHEDULER_STALE_AFTER in scrinalia.settings; the scheduler
-- passes at least every --max-sleep seconds (default 5), so keep it well above that.
CREATE OR REPLACE FUNCTION scrinalia.scheduler_stale_after()
RETURNS interval
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT scrinalia.setting_interval('SCHEDULER_STALE_AFTER', interval '30 seconds') $$;

-- An enabled schedule whose due instant passed longer ago than this is overdue
-- (scheduler_health() says so). SCHEDULE_OVERDUE_GRACE in scrinalia.settings.
CREATE OR REPLACE FUNCTION scrinalia.overdue_grace()
RETURNS interval
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT scrinalia.setting_interval('SCHEDULE_OVERDUE_GRACE', interval '1 minute') $$;

-- A run interrupted because its lease expired is a LEASE_REAPED alert, and counts in
-- scheduler_metrics().leases_reaped_last_hour, for this long after the reap.
CREATE OR REPLACE FUNCTION scrinalia.reaped_alert_window()
RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT interval '1 hour' $$;

-- How far ahead of a due instant the scheduler may tick it (tick_due_at): the runs are
-- made then and become visible at the instant; the slots are taken this much early.
CREATE OR REPLACE FUNCTION scrinalia.max_tick_ahead()
RETURNS interval
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN interval '1 second'; END $$;

-- The instants the daemons work with: [period_start(), period_end()). Every
-- occurrence the shim computes is inside (its datetimes end with year 9999, and this
-- system has no period before 1970). A schedule's next_run_at outside, written by
-- hand (4713 BC, year 1, year 20000), is treated like 'infinity': not armed, so the
-- tick re-arms it from now() and enqueues nothing for it, and next_wakeup() never
-- hands it to the shim, which could not even read it; next_claimable_at() keeps a
-- runner's wait inside them too.
CREATE OR REPLACE FUNCTION scrinalia.period_start()
RETURNS timestamptz
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN timestamptz '1970-01-01 00:00:00+00'; END $$;

CREATE OR REPLACE FUNCTION scrinalia.period_end()
RETURNS timestamptz
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN timestamptz '10000-01-01 00:00:00+00'; END $$;

-- How long a session other than the scheduler's may hold what the scheduler needs (a
-- due schedule's row, a worker's slot, the scheduler-state row) before
-- scheduler_health() names it: an enqueue or a schedule's save holds one for
-- milliseconds, a transaction left open for ever.
CREATE OR REPLACE FUNCTION scrinalia.blocker_grace()
RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT interval '5 seconds' $$;

-- When a lease really ends, given its expiry, its length and when it was last renewed
-- (the claim or the last heartbeat). A lease renewed before this server started and
-- not run out a lease before the start (run out while the server was down, or running
-- out in the seconds after it came back) is held at least one lease from the start:
-- the outage counts as the heartbeat nobody could send, and a runner reconnecting with
-- backoff gets a whole lease to heartbeat or report, so the reaper cannot beat it. A
-- lease renewed by this server, or that ran out longer before its start, ends at its
-- own expiry. (A promoted standby's start is its own, long before a failover: no grace.)
CREATE OR REPLACE FUNCTION scrinalia.lease_held_until(p_expires_at timestamptz, p_duration interval,
                                                     p_renewed_at timestamptz,
                                                     p_server_start timestamptz DEFAULT pg_postmaster_start_time())
RETURNS timestamptz
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_renewed_at < p_server_start AND p_expires_at > p_server_start - p_duration THEN
        RETURN greatest(p_expires_at, p_server_start + p_duration);
    END IF;
    RETURN p_expires_at;
END $$;

-- An instant the scheduler repaired (a next_run_at beyond its cron's next occurrence,
-- a retry's not_before beyond the retry cap) is an INSTANT_REPAIRED alert this long.
CREATE OR REPLACE FUNCTION scrinalia.repair_alert_window()
RETURNS interval
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT interval '1 hour' $$;

-- A fold of the metrics' deltas that covers more runs than this (the ledger's size as
-- last sampled, p_ledger_rows, NULL or -1 when never) samples the ledger before it
-- recomputes the periods (fold_tallies()): a bulk change outgrew the statistics that
-- plan those probes. Autovacuum's own threshold: 10% of the rows, and a floor.
CREATE OR REPLACE FUNCTION scrinalia.fold_sample_threshold(p_ledger_rows double precision)
RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT 1000 + 0.1 * greatest(coalesce(p_ledger_rows, 0), 0) $$;

-- How long a rebuild of the metrics' tallies waits for the ledger's writers under way:
-- writers queue behind its lock, so a session idle in a transaction that wrote the
-- ledger must not stall them all for longer.
CREATE OR REPLACE FUNCTION scrinalia.tally_rebuild_lock_wait()
RETURNS interval
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT interval '5 seconds' $$;

-- Every run has a maximum run time: a RUNNING run past it is ended (INTERRUPTED, so a
-- scheduled period is retried under the ADR's rule) by the scheduler's pass. This is
-- the default; the owner sets a worker's own with set_max_run_time(), between the two
-- bounds below.
CREATE OR REPLACE FUNCTION scrinalia.default_max_run_time()
RETURNS interval
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ BEGIN RETURN interval '1 hour'; END $$;

CREATE OR REPLACE FUNCTION scrinalia.shortest_max_run_time()
RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT interval '1 second' $$;

CREATE OR REPLACE FUNCTION scrinalia.longest_max_run_time()
RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT interval '7 days' $$;

-- The workers' alerts (current_alerts(), worker_metrics()): a run is overrunning once
-- it has run this share of its maximum run time...
CREATE OR REPLACE FUNCTION scrinalia.overrun_alert_share()
RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT 0.8::double precision $$;

-- ...or once its schedule has skipped this many periods in a row, the last while it ran;
CREATE OR REPLACE FUNCTION scrinalia.overrun_alert_periods()
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT 2 $$;

-- a schedule whose last this many periods were all skipped is starved;
CREATE OR REPLACE FUNCTION scrinalia.starved_alert_periods()
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT 3 $$;

-- a claimable QUEUED run no runner has claimed for this long is unclaimed (the rule of
-- monitoring/alerts.rules.yml's ScrinaliaNoRunnerClaiming says the same);
CREATE OR REPLACE FUNCTION scrinalia.unclaimed_alert_after()
RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT interval '5 minutes' $$;

-- and a run ended at its maximum run time is a RUN_TIMED_OUT alert this long.
CREATE OR REPLACE FUNCTION scrinalia.timed_out_alert_window()
RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT interval '1 hour' $$;

-- A runner's stall (38_runner_stalls.sql: every handler thread held by a run told to
-- stop) is a RUNNER_STUCK alert until this long after the runner last said so: it says
-- so when it is stuck and when it exits for it, so the alert outlives the exit (a
-- supervisor restarts the runner at once) long enough to be seen.
CREATE OR REPLACE FUNCTION scrinalia.runner_stall_alert_window()
RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT interval '1 hour' $$;

-- A stall whose runner's exit time passed this long ago without a word from it is gone
-- (killed, its host lost): no longer counted as stuck now. (The runner exits a moment
-- after that time, at its next look.)
CREATE OR REPLACE FUNCTION scrinalia.runner_stall_exit_slack()
RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT interval '1 minute' $$;

-- The stalls kept at most per login (its oldest reported goes first), and the threads a
-- stall may name: a runner login cannot grow the table without bound.
CREATE OR REPLACE FUNCTION scrinalia.max_runner_stalls()
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT 1000 $$;

CREATE OR REPLACE FUNCTION scrinalia.max_stall_threads()
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT 1024 $$;

-- How many instants next_fires() previews at most: enough for any look ahead an
-- operator reads, few enough that the rarest cron (29 February, every 4 to 8 years)
-- is answered in well under a second.
CREATE OR REPLACE FUNCTION scrinalia.max_fire_previews()
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT 100 $$;

-- Pushed alerts (announce_alerts, 88_alerts.sql): the scheduler's pass computes the
-- current alerts at most this often (at 100,000 workers that is a tenth of a second
-- or two: not at every pass), and sends each new one once on scrinalia_alerts...
CREATE OR REPLACE FUNCTION scrinalia.alert_check_interval()
RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT interval '10 seconds' $$;

-- ...naming at most this many of its run ids (the payload says how many there are).
CREATE OR REPLACE FUNCTION scrinalia.max_alert_run_ids()
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT 20 $$;

-- Retention (prune_expired_runs, 85_retention.sql): the scheduler's pass deletes the
-- finished runs older than this (the owner changes it with set_run_retention(), or
-- turns it off)...
CREATE OR REPLACE FUNCTION scrinalia.default_run_retention()
RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT interval '90 days' $$;

-- ...starting a sweep at most this often (the first pass after its start, when the
-- last sweep began longer ago)...
CREATE OR REPLACE FUNCTION scrinalia.retention_interval()
RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT interval '1 hour' $$;

-- ...in batches of at most this many runs, each its own short transaction...
CREATE OR REPLACE FUNCTION scrinalia.retention_batch()
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT 500 $$;

-- ...at most this many batches a pass (a sweep left unfinished goes on at the next)...
CREATE OR REPLACE FUNCTION scrinalia.retention_batches_per_pass()
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT 20 $$;

-- ...and a chore of the scheduler's pass (a batch of the retention, the alerts' check)
-- waits at most this long for a lock: then it gives up until the next pass, rather than
-- hold the ticks up.
CREATE OR REPLACE FUNCTION scrinalia.chore_lock_timeout()
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT '1s'::text $$;
