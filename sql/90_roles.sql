-- Least privilege: nobody but the owner touches a table; each group may call exactly
-- the functions of its job, all SECURITY DEFINER with a pinned search_path.
--   reader     reads the views and a schedule
--   operator   reader + schedule writes, settings, manual enqueue, cancel
--   runner     claim, heartbeat, finish, release (one run or a batch), the units it processes
--   scheduler  due, tick, retries, reaping, when to wake
--   monitor    what monitoring/queries.yaml calls (counts and health), no run's text
REVOKE ALL ON SCHEMA scrinalia FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA scrinalia FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA scrinalia FROM PUBLIC;
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA scrinalia FROM PUBLIC;

GRANT USAGE ON SCHEMA scrinalia
   TO scrinalia_reader, scrinalia_operator, scrinalia_runner, scrinalia_scheduler;

-- shared by all four: the start-up check and the pure helpers
GRANT EXECUTE ON FUNCTION
    scrinalia.schema_head(),
    scrinalia.max_attempts(),
    scrinalia.active_statuses(),
    scrinalia.terminal_statuses(),
    scrinalia.validate_cron(text),
    scrinalia.cron_grammar(),
    scrinalia.cron_fields(text),
    scrinalia.cron_field_mask(text, integer),
    scrinalia.cron_masks(text),
    scrinalia.cron_masks_match(bigint, integer, bigint, integer, integer, boolean, timestamp),
    scrinalia.validate_timezone(text),
    scrinalia.retry_delay(integer, double precision),
    scrinalia.retry_base_delay(),
    scrinalia.retry_max_delay(),
    scrinalia.retry_jitter(),
    scrinalia.max_cron_length(),
    scrinalia.max_timezone_length(),
    scrinalia.max_request_bytes(),
    scrinalia.default_max_run_time()  -- (the views' limit of a worker without its own)
   TO scrinalia_reader, scrinalia_operator, scrinalia_runner, scrinalia_scheduler;

GRANT SELECT ON scrinalia.worker_agenda, scrinalia.worker_run_history, scrinalia.worker_queue_counters
   TO scrinalia_reader;
-- the exporter's run counts (monitoring/queries.yaml): counts per worker, status, trigger
GRANT SELECT ON scrinalia.ledger_counts TO scrinalia_reader;
GRANT EXECUTE ON FUNCTION scrinalia.pending_run_counts() TO scrinalia_reader;
GRANT EXECUTE ON FUNCTION
    scrinalia.get_schedule(text),
    scrinalia.scheduler_status(),
    scrinalia.scheduler_health(interval),
    scrinalia.default_timezone(),
    scrinalia.current_alerts(boolean),
    scrinalia.worker_metrics(),
    scrinalia.run_counts(),
    scrinalia.scheduler_metrics(),
    scrinalia.runner_stalls(),
    scrinalia.runner_stall_metrics()
   TO scrinalia_reader;
-- the command line's reads of one worker's runs (runs WORKER, runs WORKER --timeline)
GRANT EXECUTE ON FUNCTION
    scrinalia.worker_runs(text, integer),
    scrinalia.worker_timeline(text, integer)
   TO scrinalia_reader;
-- the catalogue (worker list, worker show): which presets exist; written by the owner only
GRANT SELECT ON scrinalia.worker_catalogue TO scrinalia_reader;

GRANT EXECUTE ON FUNCTION
    scrinalia.put_schedule(text, text, text, jsonb, boolean, text, bigint),
    scrinalia.put_schedules(jsonb, text, bigint),
    scrinalia.set_schedule_enabled(text, boolean, text),
    scrinalia.delete_schedule(text),
    scrinalia.put_settings(text, jsonb, text, bigint),
    scrinalia.set_default_timezone(text),
    scrinalia.enqueue(text, jsonb, scrinalia.run_trigger, text),
    scrinalia.enqueue_runs(text[], jsonb[], scrinalia.run_trigger, text),
    scrinalia.cancel_run(bigint, text),
    scrinalia.add_units(text, text[])
   TO scrinalia_operator;

GRANT EXECUTE ON FUNCTION
    scrinalia.claim_next(text, interval, text[]),
    scrinalia.claim_runs(text, interval, text[], integer),
    scrinalia.heartbeat(bigint, uuid),
    scrinalia.heartbeat_runs(bigint[], uuid[]),
    scrinalia.finish(bigint, uuid, scrinalia.run_status, text, text),
    scrinalia.finish_runs(bigint[], uuid[], scrinalia.run_status[], text[], text[]),
    scrinalia.release_runs(bigint[], uuid[]),
    scrinalia.next_claimable_at(text[]),
    scrinalia.mark_units_processed(text, text[]),
    -- (38_runner_stalls.sql: every handler thread held by a run told to stop)
    scrinalia.report_runner_stuck(text, bigint[], integer, interval),
    scrinalia.clear_runner_stuck(text),
    scrinalia.report_runner_stuck_exit(text)
   TO scrinalia_runner;

-- The scheduler's functions. ADR 0015: the scheduler runs with the API's (operator)
-- credential or a runner's as well; the scheduler group is the least-privilege choice.
GRANT EXECUTE ON FUNCTION
    scrinalia.scheduler_lock_key(),
    scrinalia.check_scheduler_lock(integer),
    scrinalia.scheduler_heartbeat(text, integer),
    scrinalia.evict_stale_scheduler(),
    scrinalia.due_schedules(integer),
    scrinalia.set_schedules_aside(text[], text[]),
    scrinalia.tick_v2(text[], timestamptz[], text),
    scrinalia.tick_due_at_v2(timestamptz, text[], timestamptz[], text),
    -- (without catch_up: the schedulers of earlier releases)
    scrinalia.tick(text[], timestamptz[], text),
    scrinalia.tick_due_at(timestamptz, text[], timestamptz[], text),
    scrinalia.schedules_due_at(timestamptz, integer),
    scrinalia.create_retries(),
    scrinalia.reap_expired_leases(),
    scrinalia.next_wakeup(),
    scrinalia.scheduler_status(),
    scrinalia.scheduler_health(interval)
   TO scrinalia_scheduler, scrinalia_operator, scrinalia_runner;

-- a runner's start-up warning: which of its handlers name no registered worker
GRANT EXECUTE ON FUNCTION scrinalia.unregistered_workers(text[]) TO scrinalia_runner;

-- The monitoring group: the exporter's login reads counts, gauges and the health answer,
-- never a run's request, config, error or lease owner. A cluster whose groups an earlier
-- release created may lack it until `groups create` runs again (migrate says so).
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) 'scrinalia_monitor') THEN
        GRANT USAGE ON SCHEMA scrinalia TO scrinalia_monitor;
        GRANT EXECUTE ON FUNCTION
            scrinalia.schema_head(),
            scrinalia.installed_release(),
            scrinalia.scheduler_health(interval),
            scrinalia.scheduler_metrics(),
            scrinalia.worker_metrics(),
            scrinalia.run_counts(),
            scrinalia.runner_stall_metrics()
           TO scrinalia_monitor;
        GRANT SELECT ON scrinalia.ledger_counts TO scrinalia_monitor;
        GRANT EXECUTE ON FUNCTION scrinalia.pending_run_counts() TO scrinalia_monitor;
    END IF;
END $$;

-- The standby's wait in the lock's queue, and its eviction of a holder that keeps the
-- lock from a scheduler (45_scheduler_lock.sql).
GRANT EXECUTE ON FUNCTION
    scrinalia.take_scheduler_lock(text, interval, integer),
    scrinalia.evict_lock_holder(integer),
    scrinalia.limit_scheduler_session(interval),
    scrinalia.limit_scheduler_lock_session(),
    scrinalia.limit_scheduler_work_session()
   TO scrinalia_scheduler, scrinalia_operator, scrinalia_runner;

-- What status says of this install: CONNECT still granted to PUBLIC, the owner unable
-- to end a session (70_status.sql).
GRANT EXECUTE ON FUNCTION
    scrinalia.public_can_connect(),
    scrinalia.takeover_grant_missing()
   TO scrinalia_reader, scrinalia_operator, scrinalia_runner, scrinalia_scheduler;

-- Re-running an ended run by hand (32_rerun.sql): a manual enqueue, the operator's.
GRANT EXECUTE ON FUNCTION scrinalia.rerun(bigint, text) TO scrinalia_operator;

-- A schedule's next instants (41_previews.sql): a read of one worker's schedule.
GRANT EXECUTE ON FUNCTION scrinalia.next_fires(text, integer) TO scrinalia_reader;

-- The scheduler's chores (85_retention.sql, 88_alerts.sql): the retention's batches and
-- the pushed alerts, for whoever may run the scheduler (and only from its session:
-- check_scheduler_caller). Listening to scrinalia_alerts needs no grant. The retention
-- is changed by the operator (who may prune_runs by hand already); what status says of
-- it, numbers and instants only, is read by the reader and the monitor.
GRANT EXECUTE ON FUNCTION
    scrinalia.prune_expired_runs(integer),
    scrinalia.announce_alerts()
   TO scrinalia_scheduler, scrinalia_operator, scrinalia_runner;
GRANT EXECUTE ON FUNCTION scrinalia.set_run_retention(interval) TO scrinalia_operator;
GRANT EXECUTE ON FUNCTION scrinalia.retention_status() TO scrinalia_reader;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) 'scrinalia_monitor') THEN
        GRANT EXECUTE ON FUNCTION scrinalia.retention_status() TO scrinalia_monitor;
    END IF;
END $$;

-- What status reads of a large install (89_agenda_pages.sql): totals and the first rows.
GRANT EXECUTE ON FUNCTION
    scrinalia.agenda_totals(),
    scrinalia.agenda_focus(integer),
    scrinalia.queue_totals(),
    scrinalia.busiest_queues(integer)
   TO scrinalia_reader;
