-- What "is scheduling happening?" needs: a schedule the shim cannot compute is set
-- aside with its error (so it neither spins the scheduler nor hides), and the
-- scheduler records a heartbeat every pass, not only when something is due.
-- depends: 0004_roles

ALTER TABLE scrinalia.archive_worker_schedules
    -- Why the scheduler could not compute the next occurrence (NULL: it could).
    ADD COLUMN arm_error text,
    -- Since when it has failed, and when the scheduler tries it again.
    ADD COLUMN arm_error_since timestamptz,
    ADD COLUMN arm_retry_at timestamptz,
    -- Periods skipped because the slot was busy, for ever (a metric's counter).
    ADD COLUMN skipped_count bigint NOT NULL DEFAULT 0;

CREATE INDEX ix_worker_schedules_set_aside
    ON scrinalia.archive_worker_schedules (arm_retry_at)
    WHERE enabled AND arm_error IS NOT NULL;

ALTER TABLE scrinalia.scheduler_state
    -- Written by the lock holder at every pass (at a bounded rate), idle or not.
    ADD COLUMN heartbeat_at timestamptz,
    ADD COLUMN heartbeat_pid integer,        -- the session holding the lock
    ADD COLUMN heartbeat_work_pid integer,   -- the holder's session that ticks
    ADD COLUMN heartbeat_by text;

-- Leases reaped recently: what the alerts read, without scanning the history.
CREATE INDEX ix_worker_runs_reaped
    ON scrinalia.archive_worker_runs (finished_at)
    WHERE error_fingerprint = 'lease-expired';
