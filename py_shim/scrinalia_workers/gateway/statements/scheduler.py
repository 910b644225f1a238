"""The statements the scheduler daemon sends (scrinalia_workers.scheduler).

Each is a call of the SQL API (sql/) a psql user can run too; the result columns are
named, and the scheduler reads them by name."""

# Every function these statements call: checked at start-up, so that a login without
# them gets one line and exit 2 instead of a crash loop.
REQUIRED_FUNCTIONS: tuple[str, ...] = (
    "scheduler_lock_key()",
    "scheduler_heartbeat(text, integer)",
    "check_scheduler_lock(integer)",
    "scheduler_status()",
    "reap_expired_leases()",
    "create_retries()",
    "due_schedules(integer)",
    "set_schedules_aside(text[], text[])",
    "tick_v2(text[], timestamp with time zone[], text)",
    "tick_due_at_v2(timestamp with time zone, text[], timestamp with time zone[], text)",
    "schedules_due_at(timestamp with time zone, integer)",
    "next_wakeup()",
    "take_scheduler_lock(text, interval, integer)",
    "evict_lock_holder(integer)",
    "limit_scheduler_session(interval)",
    "limit_scheduler_lock_session()",
    "limit_scheduler_work_session()",
)

# --- the lock session ------------------------------------------------------------------

# the server's pid, not libpq's: behind a pooler they differ
SERVER_PID = "SELECT pg_backend_pid() AS pid"
RELEASE_LOCK = "SELECT pg_advisory_unlock(scrinalia.scheduler_lock_key())"
LISTEN = "LISTEN scrinalia_scheduler"
# held: whether this session holds the lock (the heartbeat is recorded only then);
# pid: the session that answered, which a transaction pooler may have swapped
HEARTBEAT = "SELECT scrinalia.scheduler_heartbeat(%s, %s) AS held, pg_backend_pid() AS pid"

# --- the work session ------------------------------------------------------------------

# a tick must never hang behind a row lock of a frozen peer (see evict_lock_holder)
SET_LOCK_TIMEOUT = "SET lock_timeout = '10s'"
# The instants a pass reads (thousands a chunk) in UTC, whatever the server's zone:
# psycopg loads a timestamptz as datetime.timezone.utc only in a session whose
# TimeZone is 'UTC' (any other name, 'Etc/UTC' too, costs a zone conversion a value),
# and UTC datetimes compare and subtract as instants even across a fall-back fold.
SET_UTC = "SET TimeZone = 'UTC'"
# the prepared tick's transaction, sent whole in one pipeline (scheduler.prepared)
BEGIN = "BEGIN"
COMMIT = "COMMIT"
# first in every tick transaction: raises NOT_LOCK_HOLDER unless that session holds the lock
CHECK_LOCK = "SELECT scrinalia.check_scheduler_lock(%s)"
REAP_EXPIRED_LEASES = (
    "SELECT run_id, worker_name, lease_owner, error, error_fingerprint FROM scrinalia.reap_expired_leases()"
)
CREATE_RETRIES = "SELECT run_id, retry_of, worker_name, attempt, not_before FROM scrinalia.create_retries()"
# (not next_run_at: the pass does not use it, and a stored one may be out of datetime's
# range; db_now is the transaction's now(): read by psycopg's own loader, now_instants_cursor)
DUE_SCHEDULES = "SELECT worker_name, cron, timezone, db_now FROM scrinalia.due_schedules(%s)"
SET_SCHEDULES_ASIDE = (
    "SELECT worker_name, arm_error, arm_error_since, arm_retry_at"
    " FROM scrinalia.set_schedules_aside(%b::text[], %b::text[])"
)
# (every instant in datetime's range, read by psycopg's own loader: scheduled_for is
# NULL outside the periods' range, the next instants were checked before it; a refusal
# keeps the stored one, which may be out of range, and its line does not show it)
TICK = (
    "SELECT worker_name, decision, run_id, scheduled_for,"
    " CASE WHEN decision <> 'REFUSED' THEN next_run_at END AS next_run_at, reason, catch_up"
    " FROM scrinalia.tick_v2(%b::text[], %b::timestamptz[], %s)"
)
# the next due instant, and how far ahead of the server's now() it is
NEXT_WAKEUP = "SELECT w AS wake_at, extract(epoch FROM w - now())::float8 AS wake_in FROM scrinalia.next_wakeup() w"
SCHEDULES_DUE_AT = "SELECT worker_name, cron, timezone FROM scrinalia.schedules_due_at(%s, %s)"
TICK_DUE_AT = (
    "SELECT worker_name, decision, run_id, scheduled_for, next_run_at, reason, catch_up, now() AS db_now"
    " FROM scrinalia.tick_due_at_v2(%s, %b::text[], %b::timestamptz[], %s)"
)

# --- the lock's queue ---------------------------------------------------------------------

# the standby waits in the lock's queue at most %s seconds; once granted, the heartbeat
# is written in the same statement (got: whether it has the lock)
TAKE_LOCK = "SELECT scrinalia.take_scheduler_lock(%s, make_interval(secs => %s), %s) AS got"
# ends a holder that keeps the lock from a scheduler; %s: the pid seen holding it last time
EVICT_LOCK_HOLDER = "SELECT evicted, holder_pid, holder_role, reason FROM scrinalia.evict_lock_holder(%s)"
# both sessions end themselves when idle (or idle in a transaction) longer than
# SCHEDULER_STALE_AFTER and a margin (%s seconds: the longest wait between two of our
# statements): a frozen holder frees the lock without any privilege
LIMIT_SESSION = "SELECT scrinalia.limit_scheduler_session(make_interval(secs => %s))"
# once the lock is ours: the server ends the lock session when it is idle a few seconds
# (a frozen holder; on PostgreSQL 13, idle inside its transaction); idle: that limit in seconds
LIMIT_LOCK_SESSION = "SELECT extract(epoch FROM scrinalia.limit_scheduler_lock_session())::float8 AS idle"
# the work session: the server ends it when it is idle inside a transaction as long
LIMIT_WORK_SESSION = "SELECT scrinalia.limit_scheduler_work_session()"
# what keeps a session from those limits (the lock session's before the work session is
# open; the work session's while the cron work of a chunk runs inside its transaction)
KEEP_ALIVE = "SELECT 1 AS alive"
# PostgreSQL 13: the holder's lock session kept inside a transaction (its only idle limit
# is the one inside a transaction): opened once the lock is ours, then after each
# statement ended and opened again in one message (simple query: no moment between)
BEGIN = "BEGIN"
COMMIT_AND_BEGIN = "COMMIT; BEGIN"
ROLLBACK_AND_BEGIN = "ROLLBACK; BEGIN"
# who holds the lock, and whether its own session wrote the heartbeat (heartbeat_pid)
LOCK_HOLDER_HEARTBEAT = (
    "SELECT holder_pid, holder_role, holder_application, holder_backend_start, holder_is_scheduler,"
    " heartbeat_at, heartbeat_pid FROM scrinalia.scheduler_status()"
)

# --- the repair of stored instants no cron or policy produces (sql/55_repair.sql) -------

REPAIR_INSTANTS = "SELECT kind, worker_name, run_id, was, repaired_to, message FROM scrinalia.repair_instants(%s)"
ARMED_SCHEDULE_CRONS = "SELECT cron, timezone, db_now FROM scrinalia.armed_schedule_crons()"
REARM_SCHEDULES_AHEAD = (
    "SELECT worker_name, cron, timezone, was, next_run_at"
    " FROM scrinalia.rearm_schedules_ahead(%b::text[], %b::text[], %b::timestamptz[], %s)"
)
REQUIRED_FUNCTIONS = (
    *REQUIRED_FUNCTIONS,
    "repair_instants(text)",
    "armed_schedule_crons()",
    "rearm_schedules_ahead(text[], text[], timestamp with time zone[], text)",
)

# --- the pass's chores: the retention and the pushed alerts (sql/85, sql/88) -----------

# one batch of the retention, its number in this pass; no row: nothing to do
PRUNE_EXPIRED_RUNS = "SELECT removed, cutoff, more, finished, sweep_removed FROM scrinalia.prune_expired_runs(%s)"
# the new alerts, each sent once on the channel scrinalia_alerts at the commit
ANNOUNCE_ALERTS = "SELECT scrinalia.announce_alerts() AS sent"
REQUIRED_FUNCTIONS = (*REQUIRED_FUNCTIONS, "prune_expired_runs(integer)", "announce_alerts()")
