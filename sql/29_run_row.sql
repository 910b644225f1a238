-- The run row the functions return (enqueue, enqueue_runs, claim_runs, claim_next,
-- finish, rerun, cancel_run, reap_expired_leases): scrinalia.worker_run_v1, the
-- ledger's row as it was before catch_up (migration 0015), whatever columns the ledger
-- gains. A caller that prepared a statement against it keeps its result type, and
-- services read the same columns; a column the ledger gains is read where it is
-- meant to be (worker_run_history, worker_runs()), or from a function of a new name.
-- One SQL expression with no SET clause: inlined into the statement that calls it,
-- the run's columns read where it reads them.
CREATE OR REPLACE FUNCTION scrinalia.run_v1(r scrinalia.archive_worker_runs)
RETURNS scrinalia.worker_run_v1
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT ROW(r.run_id, r.worker_name, r.status, r.trigger, r.request, r.config, r.config_sources,
               r.requested_by, r.lease_owner, r.lease_token, r.lease_expires_at, r.lease_duration,
               r.heartbeat_at, r.created_at, r.started_at, r.finished_at, r.error, r.error_fingerprint,
               r.duration, r.attempt, r.retry_of, r.not_before, r.scheduled_for,
               r.retry_pending)::scrinalia.worker_run_v1
$$;
