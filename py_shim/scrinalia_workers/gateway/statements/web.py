"""What the web view sends: the reads of `status`, `runs`, `runs --timeline` and
`schedule get` (statements/cli.py), over the same views and functions so that the page
and the terminal never disagree, paged; and the operator's writes, the CLI's calls.

Pages are keyset-paged (worker_name after, run_id before) and read one row more than
they show, to know whether a next page exists. Parameters are psycopg's named ones.
"""

from scrinalia_workers.gateway.statements import cli

# --- who is looking -------------------------------------------------------------

# (the groups as text[]): which of them this login is in (directly or through another)
LOGIN_GROUPS = (
    "SELECT current_user AS login, coalesce(array_agg(r.rolname::text ORDER BY r.rolname), '{}') AS groups,"
    " (SELECT s.rolsuper FROM pg_catalog.pg_roles s WHERE s.rolname = current_user) AS superuser"
    " FROM pg_catalog.pg_roles r WHERE r.rolname = ANY (%(groups)s::text[])"
    " AND pg_catalog.pg_has_role(current_user, r.oid, 'USAGE')"
)
# whether this login may call the operator's writes, and whether re-run exists here and
# may be called (another release adds it: absent, the action is not offered)
CAN_ACT = (
    "SELECT pg_catalog.has_function_privilege('scrinalia.cancel_run(bigint, text)', 'EXECUTE') AS operate,"
    " coalesce(pg_catalog.has_function_privilege("
    "pg_catalog.to_regprocedure('scrinalia.rerun(bigint, text)'), 'EXECUTE'), false) AS rerun"
)
# the session's bound: no page waits on the database longer than a request may last
STATEMENT_TIMEOUT = "SELECT pg_catalog.set_config('statement_timeout', %(ms)s, false)"

# --- the scheduler's health (status; a monitor may read the first) -------------------

NOW = "SELECT now() AS now"
HEALTH = (
    "SELECT healthy, reason, holder_role, heartbeat_age, overdue_schedules, set_aside_schedules"
    " FROM scrinalia.scheduler_health()"
)
SCHEDULER_STATUS = "SELECT * FROM scrinalia.scheduler_status()"
MAX_ATTEMPTS = "SELECT scrinalia.max_attempts() AS max_attempts"

# --- the agenda (status), a page of workers after a name ------------------------------

# (after, n)
AGENDA_PAGE = "SELECT * FROM scrinalia.worker_agenda WHERE worker_name > %(after)s ORDER BY worker_name LIMIT %(n)s"
# (w,): no row for an unknown worker
WORKER_AGENDA = "SELECT * FROM scrinalia.worker_agenda WHERE worker_name = %(w)s"

# --- the active runs and the alerts ----------------------------------------------------

# (n)
ACTIVE_RUNS = (
    "SELECT run_id, worker_name, status, trigger, attempt_label, lease_owner, lease_expires_at, not_before,"
    " created_at FROM scrinalia.worker_run_history WHERE status = ANY (scrinalia.active_statuses())"
    " ORDER BY run_id LIMIT %(n)s"
)
# (n): status's, the same rows
ALERTS = cli.ALERTS

# --- the run history (runs, runs WORKER), newest first ----------------------------------

# (before, n): every worker's, the primary key read backwards
RUNS_PAGE = "SELECT * FROM scrinalia.worker_run_history WHERE run_id < %(before)s ORDER BY run_id DESC LIMIT %(n)s"
# (w, n): one worker's first page, as `runs WORKER` reads it
WORKER_RUNS = "SELECT * FROM scrinalia.worker_runs(%(w)s, %(n)s) ORDER BY run_id DESC"
# (w, before, n): its next pages
WORKER_RUNS_PAGE = (
    "SELECT * FROM scrinalia.worker_run_history WHERE worker_name = %(w)s AND run_id < %(before)s"
    " ORDER BY run_id DESC LIMIT %(n)s"
)
# (w, periods): its scheduled periods with their attempts, as `runs WORKER --timeline`
WORKER_TIMELINE = (
    "SELECT run_id, trigger, status, attempt, attempt_label, retry_of, scheduled_for, not_before,"
    " created_at, started_at, finished_at, duration, error"
    " FROM scrinalia.worker_timeline(%(w)s, %(periods)s) ORDER BY scheduled_for DESC, attempt"
)

# --- the operator's actions (behind --allow-actions), the CLI's calls -----------------

# (w, enabled, by)
SET_SCHEDULE_ENABLED = "SELECT scrinalia.set_schedule_enabled(%(w)s, %(enabled)s, %(by)s)"
# (w, by): a manual run with the schedule's defaults
ENQUEUE = "SELECT run_id FROM scrinalia.enqueue(%(w)s, '{}'::jsonb, 'MANUAL', %(by)s)"
# (run, by)
CANCEL_RUN = "SELECT run_id FROM scrinalia.cancel_run(%(run)s, %(by)s)"
# (run, by): offered only where CAN_ACT finds it
RERUN = "SELECT * FROM scrinalia.rerun(%(run)s, %(by)s)"
