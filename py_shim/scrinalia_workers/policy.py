"""The policy numbers the shim checks before it calls SQL, each the mirror of one
function of sql/05_policy.sql, their one home: a bad flag, file or name is refused
before a connection, with the bound the database would apply.
tests/sql/test_policy_mirror.py holds each equal to its SQL function; change both."""

from __future__ import annotations

MIN_LEASE_SECONDS = 1.0  # scrinalia.min_lease()
MAX_LEASE_SECONDS = 86400.0  # scrinalia.max_lease()
MAX_CLAIM_BATCH = 1000  # scrinalia.max_claim_batch()
MAX_RUNNER_ID_LENGTH = 200  # scrinalia.max_runner_id_length()
MAX_ACTOR_LENGTH = 200  # scrinalia.max_actor_length(): updated_by, requested_by, the scheduler's name
MAX_CRON_LENGTH = 200  # scrinalia.max_cron_length()
MAX_TIMEZONE_LENGTH = 64  # scrinalia.max_timezone_length()

# Each mirror and the SQL expression that must equal it (the agreement test's table).
MIRRORS = {
    "MIN_LEASE_SECONDS": "extract(epoch FROM scrinalia.min_lease())::float8",
    "MAX_LEASE_SECONDS": "extract(epoch FROM scrinalia.max_lease())::float8",
    "MAX_CLAIM_BATCH": "scrinalia.max_claim_batch()",
    "MAX_RUNNER_ID_LENGTH": "scrinalia.max_runner_id_length()",
    "MAX_ACTOR_LENGTH": "scrinalia.max_actor_length()",
    "MAX_CRON_LENGTH": "scrinalia.max_cron_length()",
    "MAX_TIMEZONE_LENGTH": "scrinalia.max_timezone_length()",
}
