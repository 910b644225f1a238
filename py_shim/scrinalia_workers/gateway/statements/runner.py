"""What the runner sends: each a call of the SQL API (docs/sql-api.md) a psql user can run too.

The %s placeholders are psycopg's; the runner passes arrays of run ids and lease tokens,
one element per run of a batch, so a batch costs one round trip per call.
"""

from __future__ import annotations

# The channel that enqueue() and the scheduler NOTIFY when a run becomes claimable. The
# runner listens only while it stands by: a backlog's NOTIFYs (one a run) would
# otherwise be queued for it, sent and parsed while it drains that backlog anyway.
LISTEN_FOR_RUNS = "LISTEN scrinalia_runs"
UNLISTEN_FOR_RUNS = "UNLISTEN scrinalia_runs"

# (runner_id, lease interval, worker names or NULL for all, batch limit) -> the claimed rows
# (fetched in binary: the server's output functions and the runner's parsing of a
# row's timestamps, uuid and interval cost more in text than the whole claim's UPDATE)
CLAIM_RUNS = "SELECT * FROM scrinalia.claim_runs(%s, %s, %s, %s)"

# The enum types among a run row's columns: in binary they would read as bytes unless
# loaded as text (which they are in text).
RUN_ROW_ENUMS = (
    "SELECT DISTINCT a.atttypid::int FROM pg_catalog.pg_attribute a"
    " JOIN pg_catalog.pg_type t ON t.oid = a.atttypid"
    " WHERE a.attrelid = 'scrinalia.archive_worker_runs'::regclass AND a.attnum > 0 AND t.typtype = 'e'"
)

# (run ids, lease tokens) -> one row per run; lost_reason is NULL while the lease holds
# (%b: arrays sent in binary, cheaper to build than their text)
HEARTBEAT_RUNS = "SELECT run_id, lost_reason FROM scrinalia.heartbeat_runs(%b, %b)"

# (run ids, lease tokens, statuses, error texts, fingerprints) -> one row per run; the
# texts are None when no run of the batch has one (finish_runs reads NULLs)
FINISH_RUNS = (
    "SELECT run_id, status::text, lost_reason FROM scrinalia.finish_runs(%b, %b, %b::scrinalia.run_status[], %s, %s)"
)

# (run ids, lease tokens) -> the runs given back to the queue, unstarted
RELEASE_RUNS = "SELECT run_id FROM scrinalia.release_runs(%b, %b)"

# (worker names or NULL) -> seconds until the next run of those workers can be claimed
# (negative: one can be now; NULL: none is queued)
SECONDS_TO_NEXT_CLAIMABLE = "SELECT extract(epoch FROM scrinalia.next_claimable_at(%s) - now()) AS wait"

# The runner's stall (sql/38_runner_stalls.sql): every handler thread held by a run told
# to stop ((runner id, run ids, threads, grace in seconds)); over (runner id); the runner
# exits for it (runner id)
REPORT_STUCK = "SELECT scrinalia.report_runner_stuck(%s, %s, %s, make_interval(secs => %s))"
CLEAR_STUCK = "SELECT scrinalia.clear_runner_stuck(%s)"
REPORT_STUCK_EXIT = "SELECT scrinalia.report_runner_stuck_exit(%s)"

# What a runner calls, by exact signature (types of the scrinalia schema unqualified);
# membership in scrinalia_runner grants them (sql/90_roles.sql). The start-up check
# names the one a login lacks.
RUNNER_GROUP = "scrinalia_runner"
RUNNER_FUNCTIONS = (
    "claim_runs(text, interval, text[], integer)",
    "heartbeat_runs(bigint[], uuid[])",
    "finish_runs(bigint[], uuid[], run_status[], text[], text[])",
    "release_runs(bigint[], uuid[])",
    "next_claimable_at(text[])",
    "report_runner_stuck(text, bigint[], integer, interval)",
    "clear_runner_stuck(text)",
    "report_runner_stuck_exit(text)",
)

# Which of the runner's handler names (%s) are no registered worker: a start-up warning.
UNREGISTERED_WORKERS = "SELECT scrinalia.unregistered_workers(%s)"
