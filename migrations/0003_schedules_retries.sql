-- ADR 0015: one schedule per worker, one row per attempt.
-- depends: 0002_trigger_schedule
-- Existing rows read attempt = 1, retry_of = NULL, not_before = NULL.

ALTER TABLE scrinalia.archive_worker_runs
    ADD COLUMN attempt integer NOT NULL DEFAULT 1 CHECK (attempt BETWEEN 1 AND 3),
    ADD COLUMN retry_of bigint UNIQUE REFERENCES scrinalia.archive_worker_runs,
    ADD COLUMN not_before timestamptz,
    -- The nominal period a SCHEDULE run was created for; retries inherit it.
    ADD COLUMN scheduled_for timestamptz,
    -- Set in the statement that makes a SCHEDULE attempt 1 or 2 FAILED/INTERRUPTED,
    -- cleared when the scheduler creates its retry: the retry-candidate set stays
    -- as small as the failures awaiting a retry, whatever the size of the history.
    ADD COLUMN retry_pending boolean NOT NULL DEFAULT false,
    ADD CONSTRAINT ck_worker_runs_retry_shape
        CHECK ((attempt = 1) = (retry_of IS NULL)),
    ADD CONSTRAINT ck_worker_runs_schedule_shape
        CHECK ((trigger = 'SCHEDULE') = (scheduled_for IS NOT NULL)),
    ADD CONSTRAINT ck_worker_runs_retry_only_scheduled
        CHECK (trigger = 'SCHEDULE' OR (attempt = 1 AND NOT retry_pending)),
    ADD CONSTRAINT ck_worker_runs_retry_pending_terminal
        CHECK (NOT retry_pending OR (status IN ('FAILED', 'INTERRUPTED') AND attempt < 3));

-- Belt and braces against a period enqueued twice, even by two overlapping schedulers.
CREATE UNIQUE INDEX uq_worker_run_period
    ON scrinalia.archive_worker_runs (worker_name, scheduled_for)
    WHERE attempt = 1 AND scheduled_for IS NOT NULL;

-- The owed retries: what create_retries() reads and what the tick checks per worker.
CREATE INDEX ix_worker_runs_retry_pending
    ON scrinalia.archive_worker_runs (worker_name)
    WHERE retry_pending;

CREATE TABLE scrinalia.archive_worker_schedules (
    worker_name         text PRIMARY KEY
                        REFERENCES scrinalia.archive_workers ON DELETE CASCADE,
    enabled             boolean NOT NULL DEFAULT true,
    cron                text NOT NULL,
    timezone            text NOT NULL,
    request             jsonb NOT NULL DEFAULT '{}',
    -- NULL: not armed yet; the scheduler computes it from cron and timezone.
    next_run_at         timestamptz,
    last_enqueued_at    timestamptz,
    last_skipped_at     timestamptz,
    last_run_id         bigint,
    last_skip_reason    text,
    updated_by          text,
    updated_by_user_id  bigint,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX ix_worker_schedules_due
    ON scrinalia.archive_worker_schedules (next_run_at)
    WHERE enabled;
CREATE INDEX ix_worker_schedules_unarmed
    ON scrinalia.archive_worker_schedules (worker_name)
    WHERE enabled AND next_run_at IS NULL;

-- What the panel and the operator read to answer "is the scheduler alive".
CREATE TABLE scrinalia.scheduler_state (
    id              boolean PRIMARY KEY DEFAULT true CHECK (id),
    last_tick_at    timestamptz,
    last_tick_by    text,
    ticks           bigint NOT NULL DEFAULT 0
);
INSERT INTO scrinalia.scheduler_state DEFAULT VALUES;

-- DEFAULT_TIMEZONE and other instance settings, one row each.
CREATE TABLE scrinalia.settings (
    name        text PRIMARY KEY,
    value       text NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
INSERT INTO scrinalia.settings (name, value) VALUES ('DEFAULT_TIMEZONE', 'UTC');
