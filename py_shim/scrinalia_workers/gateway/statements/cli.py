"""What the command line sends: calls of the SQL API and reads of its views (docs/sql-api.md).

`SELECT *` where the CLI's --json prints whole rows: the view or function says which
columns a row has. Parameters are psycopg's (%s, or %(name)s where named).
"""

# --- shared -------------------------------------------------------------------

SCHEMA_HEAD = "SELECT scrinalia.schema_head() AS schema_head"
MAX_ATTEMPTS = "SELECT scrinalia.max_attempts() AS max_attempts"  # the retry policy's one home

# --- runs: enqueue, cancel, settings, prune -----------------------------------

# (worker, request, requested_by)
ENQUEUE = "SELECT * FROM scrinalia.enqueue(%s, %s, 'CLI', %s)"
# (workers, requests or None, requested_by): all or nothing, the runs in worker order
ENQUEUE_RUNS = "SELECT * FROM scrinalia.enqueue_runs(%s::text[], %s::jsonb[], 'CLI', %s)"
# (run_id, cancelled_by)
CANCEL_RUN = "SELECT * FROM scrinalia.cancel_run(%s, %s)"
# (worker, settings, updated_by)
PUT_SETTINGS = "SELECT * FROM scrinalia.put_settings(%s, %s, %s)"
# (older_than, batch): how many it deleted; called until 0
PRUNE_RUNS = "SELECT scrinalia.prune_runs(%s::interval, %s) AS deleted"

# --- schedules ----------------------------------------------------------------

# (worker, cron, timezone, request, enabled, updated_by)
PUT_SCHEDULE = "SELECT scrinalia.put_schedule(%s, %s, %s, %s, %s, %s)"
# (the schedules as a JSON array, updated_by)
PUT_SCHEDULES = "SELECT created, replaced FROM scrinalia.put_schedules(%s::jsonb, %s)"
# (worker, enabled, updated_by)
SET_SCHEDULE_ENABLED = "SELECT scrinalia.set_schedule_enabled(%s, %s, %s)"
# (worker,)
DELETE_SCHEDULE = "SELECT scrinalia.delete_schedule(%s)"
# (worker,): no row for an unknown worker
WORKER_AGENDA = "SELECT * FROM scrinalia.worker_agenda WHERE worker_name = %s"

# --- status -------------------------------------------------------------------

# status --all: every worker's row, by name (a row per worker: slower on a large install)
AGENDA = "SELECT * FROM scrinalia.worker_agenda ORDER BY worker_name"
QUEUE_COUNTERS = "SELECT * FROM scrinalia.worker_queue_counters ORDER BY worker_name"
# status: the totals counted on the server, and the first (n) workers of the agenda in
# agenda_focus()'s order (what needs an operator first), each with its concern
AGENDA_TOTALS = "SELECT * FROM scrinalia.agenda_totals()"
AGENDA_FOCUS = (
    "SELECT a.*, f.focus FROM scrinalia.agenda_focus(%(n)s) f"
    " JOIN scrinalia.worker_agenda a ON a.worker_name = f.worker_name ORDER BY f.position"
)
QUEUE_TOTALS = "SELECT workers_with_units, pending, processed FROM scrinalia.queue_totals()"
# (n): the busiest queues first
BUSIEST_QUEUES = "SELECT worker_name, pending, processed FROM scrinalia.busiest_queues(%(n)s)"
SCHEDULER_STATUS = "SELECT * FROM scrinalia.scheduler_status()"
SCHEDULER_HEALTH = "SELECT healthy, reason FROM scrinalia.scheduler_health()"
# (n): the alerts of now, the oldest first
ALERTS = (
    "SELECT kind, worker_name, since, run_ids, message FROM scrinalia.current_alerts()"
    " ORDER BY since NULLS FIRST, kind, worker_name LIMIT %(n)s"
)

# --- runs: the history --------------------------------------------------------

# All runs, newest first: the primary key read backwards. (n)
RUNS = "SELECT * FROM scrinalia.worker_run_history ORDER BY run_id DESC LIMIT %(n)s"
# One worker's: its live run and its newest finished runs, through their indexes. (w, n)
WORKER_RUNS = "SELECT * FROM scrinalia.worker_runs(%(w)s, %(n)s) ORDER BY run_id DESC"
# (worker,): a row when the worker is in the catalogue
WORKER_KNOWN = "SELECT 1 AS known FROM scrinalia.worker_agenda WHERE worker_name = %s"
# One worker's last scheduled periods, newest first, each with its attempts. (w, periods)
WORKER_TIMELINE = (
    "SELECT run_id, trigger, status, attempt, attempt_label, retry_of, scheduled_for, not_before,"
    " created_at, started_at, finished_at, duration, error, catch_up, rerun_by"
    " FROM scrinalia.worker_timeline(%(w)s, %(periods)s) ORDER BY scheduled_for DESC, attempt"
)

# --- the live screen (status --watch) -----------------------------------------

NOW = "SELECT now() AS now"
WATCH_HEALTH = "SELECT healthy, reason, holder_role, heartbeat_age FROM scrinalia.scheduler_health()"
# (n): status's first workers (AGENDA_FOCUS), the columns the screen shows; AGENDA_TOTALS beside
WATCH_AGENDA = (
    "SELECT a.worker_name, a.cron, a.timezone, a.next_run_at, a.paused, a.awaiting_arm, a.scheduled, a.arm_error,"
    " a.active_run_id, a.active_status, a.active_trigger, a.active_attempt, a.active_not_before, f.focus"
    " FROM scrinalia.agenda_focus(%(n)s) f JOIN scrinalia.worker_agenda a ON a.worker_name = f.worker_name"
    " ORDER BY f.position"
)
ACTIVE_RUNS = (
    "SELECT run_id, worker_name, status, trigger, attempt_label, lease_owner, lease_expires_at, not_before,"
    " created_at FROM scrinalia.worker_run_history WHERE status = ANY (scrinalia.active_statuses()) ORDER BY run_id"
)
# (how many,)
LATEST_FAILURES = (
    "SELECT run_id, worker_name, status, attempt_label, finished_at, error FROM scrinalia.worker_run_history"
    " WHERE status IN ('FAILED', 'INTERRUPTED') ORDER BY finished_at DESC NULLS LAST, run_id DESC LIMIT %s"
)

# --- the worker catalogue (the owner's) ---------------------------------------

_CATALOGUE_COLUMNS = (
    "worker_name, description, engines, presets, options, default_config, created_at, updated_at,"
    " max_run_time, max_run_time_is_default"
)
# worker list --all
CATALOGUE = f"SELECT {_CATALOGUE_COLUMNS} FROM scrinalia.worker_catalogue ORDER BY worker_name"
# worker list: a page by name, keyset (after, n); and how many there are, and before it
CATALOGUE_PAGE = (
    f"SELECT {_CATALOGUE_COLUMNS} FROM scrinalia.worker_catalogue"
    " WHERE worker_name > %(after)s ORDER BY worker_name LIMIT %(n)s"
)
CATALOGUE_COUNT = (
    "SELECT count(*) AS workers, count(*) FILTER (WHERE worker_name <= %(after)s) AS before"
    " FROM scrinalia.worker_catalogue"
)
# (worker,)
CATALOGUE_WORKER = f"SELECT {_CATALOGUE_COLUMNS} FROM scrinalia.worker_catalogue WHERE worker_name = %s"

# --- status: the release that installed the database's code ---------------------------

INSTALLED_RELEASE = "SELECT scrinalia.installed_release() AS installed, scrinalia.schema_head() AS schema_head"

# --- status: what this install leaves open to any login -----------------------------
INSTALL_SURFACE = (
    "SELECT scrinalia.public_can_connect() AS public_can_connect,"
    " scrinalia.takeover_grant_missing() AS grant_missing, current_database() AS dbname"
)

# --- re-runs ------------------------------------------------------------------
# (run_id, requested_by): a MANUAL run of the same request, linked by rerun_of
RERUN = "SELECT * FROM scrinalia.rerun(%s, %s)"

# --- schedule previews --------------------------------------------------------
# (worker, count): the next instants its schedule fires, earliest first
NEXT_FIRES = "SELECT n, fires_at, local_time, timezone, utc_offset, note FROM scrinalia.next_fires(%s, %s)"

# --- status: the retention the scheduler keeps (sql/85_retention.sql) ----------------
RETENTION_STATUS = "SELECT * FROM scrinalia.retention_status()"
