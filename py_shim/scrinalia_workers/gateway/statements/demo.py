"""The statements of the narrated demo: its seed and tidy-up, the instants it moves to stay
short, and the reads its narration is made of."""

# Whether the database has the worker catalogue at all.
HAS_CATALOGUE = "SELECT to_regclass('scrinalia.archive_workers') IS NOT NULL"

# The catalogue's worker names.
WORKER_NAMES = "SELECT worker_name FROM scrinalia.archive_workers ORDER BY worker_name"

# Whether the instance settings (where the demo keeps its record) exist yet.
HAS_SETTINGS = "SELECT to_regclass('scrinalia.settings') IS NOT NULL"

# The demo's record: a JSON array of the names of the workers it registered.
DEMO_RECORD = "SELECT value FROM scrinalia.settings WHERE name = 'DEMO_WORKERS'"
RECORD_DEMO_WORKERS = (
    "INSERT INTO scrinalia.settings (name, value) VALUES ('DEMO_WORKERS', %s)"
    " ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value, updated_at = now()"
)

# No one registers a worker between the demo's guard and its seed.
LOCK_CATALOGUE = "LOCK TABLE scrinalia.archive_workers IN SHARE ROW EXCLUSIVE MODE"

# A demo worker: its name, its options, its tagged description.
REGISTER_DEMO_WORKER = "SELECT scrinalia.register_worker(%s, p_options => %s, p_description => %s)"

# What a worker's schedule says now.
SCHEDULE_OF = "SELECT cron, timezone, request, enabled FROM scrinalia.get_schedule(%s)"

# A demo schedule: worker, cron, request, updated_by (UTC, enabled).
PUT_DEMO_SCHEDULE = "SELECT scrinalia.put_schedule(%s, %s, 'UTC', %s, true, %s)"

# Pause a worker's schedule (worker, updated_by).
PAUSE_SCHEDULE = "SELECT scrinalia.set_schedule_enabled(%s, false, %s)"

# Cancel a queued run (run_id, cancelled_by).
CANCEL_RUN = "SELECT scrinalia.cancel_run(%s, %s)"

# The database's clock and the minute it is in.
NOW_AND_MINUTE = "SELECT now(), date_trunc('minute', now())"

# Arm schedules (workers %s) on an instant (%s), as if the scheduler had.
ARM_AT = "UPDATE scrinalia.archive_worker_schedules SET next_run_at = %s WHERE worker_name = ANY (%s)"

# demo-reindex's next period moved three days back: the catch-up to show.
REINDEX_THREE_DAYS_BACK = (
    "UPDATE scrinalia.archive_worker_schedules SET next_run_at = "
    "date_trunc('day', now()) - interval '3 days' + interval '3 hours'"
    " WHERE worker_name = 'demo-reindex' RETURNING next_run_at"
)

# The demo's runs (workers %s), oldest first, with what the narration says of each.
DEMO_RUNS = (
    "SELECT run_id, worker_name, status::text, trigger::text, attempt, retry_of,"
    " scheduled_for, not_before, not_before > now() AS waiting, error,"
    " scrinalia.max_attempts() AS max_attempts"
    " FROM scrinalia.archive_worker_runs WHERE worker_name = ANY (%s)"
    " ORDER BY run_id"
)

# A retry's backoff cut short, to keep the demo short.
HASTEN_RETRY = "UPDATE scrinalia.archive_worker_runs SET not_before = now() WHERE run_id = %s"

# Wake the runners: a run became claimable.
WAKE_RUNNERS = "NOTIFY scrinalia_runs"

# The demo's schedules that skipped a period (workers %s).
DEMO_SKIPS = (
    "SELECT worker_name, last_skipped_at, last_skip_reason, next_run_at"
    " FROM scrinalia.archive_worker_schedules WHERE worker_name = ANY (%s)"
    " AND last_skipped_at IS NOT NULL ORDER BY worker_name"
)

# What the demo set out to show, and whether the ledger shows it yet.
SHOWN = """
            SELECT (SELECT count(*) >= 2 FROM scrinalia.archive_worker_runs WHERE worker_name = 'demo-thumbnails'
                     AND status = 'SUCCEEDED') AS enqueued_each_minute,
                   EXISTS (SELECT 1 FROM scrinalia.archive_worker_schedules WHERE worker_name = 'demo-ocr'
                            AND last_skipped_at IS NOT NULL) AS skipped,
                   NOT EXISTS (SELECT 1 FROM scrinalia.archive_worker_runs WHERE worker_name = 'demo-ocr'
                                AND status = ANY (scrinalia.active_statuses())) AS ocr_done,
                   EXISTS (SELECT 1 FROM scrinalia.archive_worker_runs WHERE worker_name = 'demo-reindex'
                            AND status = 'SUCCEEDED') AS caught_up,
                   EXISTS (SELECT 1 FROM scrinalia.archive_worker_runs WHERE worker_name = 'demo-export'
                            AND retry_of IS NOT NULL AND status = 'SUCCEEDED') AS retried
        """

# The demo's queued and running runs (workers %s).
DEMO_ACTIVE_RUNS = (
    "SELECT run_id, worker_name, status::text, started_at FROM scrinalia.archive_worker_runs"
    " WHERE worker_name = ANY (%s) AND status = ANY (scrinalia.active_statuses())"
    " ORDER BY run_id"
)

# The demo's next period and the workers due in it (workers %s).
DEMO_NEXT_PERIOD = (
    "SELECT next_run_at, extract(epoch FROM next_run_at - now()) AS secs,"
    " string_agg(worker_name, ', ' ORDER BY worker_name) AS workers"
    " FROM scrinalia.archive_worker_schedules WHERE enabled AND worker_name = ANY (%s)"
    " AND next_run_at > now() GROUP BY next_run_at ORDER BY next_run_at LIMIT 1"
)

# The demo's agenda (workers %s).
DEMO_AGENDA = (
    "SELECT worker_name, cron, next_run_at, coalesce(active_status::text, '-'), last_skipped_at"
    " FROM scrinalia.worker_agenda WHERE scheduled AND worker_name = ANY (%s) ORDER BY worker_name"
)

# The demo's runs counted by status (workers %s).
DEMO_RUN_COUNTS = (
    "SELECT status::text, count(*) FROM scrinalia.archive_worker_runs"
    " WHERE worker_name = ANY (%s) GROUP BY 1 ORDER BY 1"
)

# The demo's enabled schedules (%s: the workers of its record).
DEMO_ENABLED_SCHEDULES = (
    "SELECT worker_name FROM scrinalia.archive_worker_schedules WHERE enabled"
    " AND worker_name = ANY (%s) ORDER BY worker_name"
)
# The demo's queued runs (%s: the workers of its record).
DEMO_QUEUED_RUNS = (
    "SELECT run_id FROM scrinalia.archive_worker_runs WHERE status = 'QUEUED'"
    " AND worker_name = ANY (%s) ORDER BY run_id"
)
