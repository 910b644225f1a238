-- ADR 0014: the worker catalogue, persisted settings, the ledger and the units queue.
-- Data only: functions, views, triggers and grants live in sql/ and are re-applied
-- whole after every migrate (see py_shim/scrinalia_workers/migrate.py).

CREATE SCHEMA scrinalia;

CREATE TYPE scrinalia.run_status AS ENUM
    ('QUEUED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'INTERRUPTED', 'CANCELLED');

-- SCHEDULE is added by 0002 (ADR 0015), separately, because ALTER TYPE ... ADD VALUE
-- cannot be used in the transaction that adds it.
CREATE TYPE scrinalia.run_trigger AS ENUM ('MANUAL', 'CLI');

CREATE TABLE scrinalia.archive_workers (
    worker_name     text PRIMARY KEY
                    CHECK (worker_name ~ '^[a-z][a-z0-9_.-]{0,62}$'),
    description     text NOT NULL DEFAULT '',
    -- {"engine": {"engine_options": {"name": "type", ...}}, ...}
    engines         jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(engines) = 'object'),
    -- {"preset": {config overrides}, ...}
    presets         jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(presets) = 'object'),
    -- {"option": {"type": "integer|number|string|boolean", "values": [...]?}, ...}
    options         jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(options) = 'object'),
    -- the signature default config: the last word of config resolution
    default_config  jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(default_config) = 'object'),
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE scrinalia.archive_worker_settings (
    worker_name         text PRIMARY KEY
                        REFERENCES scrinalia.archive_workers ON DELETE CASCADE,
    settings            jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(settings) = 'object'),
    updated_by          text,
    updated_by_user_id  bigint,
    updated_at          timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE scrinalia.archive_worker_runs (
    run_id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    worker_name         text NOT NULL REFERENCES scrinalia.archive_workers,
    status              scrinalia.run_status NOT NULL DEFAULT 'QUEUED',
    trigger             scrinalia.run_trigger NOT NULL,
    request             jsonb NOT NULL DEFAULT '{}',
    config              jsonb NOT NULL DEFAULT '{}',
    -- where each part of config came from: request, preset, settings or default
    config_sources      jsonb NOT NULL DEFAULT '{}',
    requested_by        text,
    lease_owner         text,
    lease_token         uuid,
    lease_expires_at    timestamptz,
    lease_duration      interval,
    heartbeat_at        timestamptz,
    created_at          timestamptz NOT NULL DEFAULT now(),
    started_at          timestamptz,
    finished_at         timestamptz,
    error               text,
    error_fingerprint   text,
    duration            interval,
    CHECK ((status = 'RUNNING') = (lease_token IS NOT NULL)),
    CHECK (status IN ('QUEUED', 'RUNNING') OR finished_at IS NOT NULL)
);

-- One slot per worker: a worker has at most one QUEUED or RUNNING run.
CREATE UNIQUE INDEX uq_worker_run_active
    ON scrinalia.archive_worker_runs (worker_name)
    WHERE status IN ('QUEUED', 'RUNNING');

-- The claim's scan and the reaper's scan touch only live rows.
CREATE INDEX ix_worker_runs_queued
    ON scrinalia.archive_worker_runs (created_at, run_id)
    WHERE status = 'QUEUED';
CREATE INDEX ix_worker_runs_running_lease
    ON scrinalia.archive_worker_runs (lease_expires_at)
    WHERE status = 'RUNNING';
-- History per worker, newest first (the panel, the CLI's runs).
CREATE INDEX ix_worker_runs_history
    ON scrinalia.archive_worker_runs (worker_name, run_id DESC);

-- The worker's queue of units: what the pending/processed counters count.
CREATE TABLE scrinalia.archive_worker_units (
    unit_id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    worker_name     text NOT NULL REFERENCES scrinalia.archive_workers ON DELETE CASCADE,
    unit_key        text NOT NULL,
    processed_at    timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (worker_name, unit_key)
);
CREATE INDEX ix_worker_units_pending
    ON scrinalia.archive_worker_units (worker_name) WHERE processed_at IS NULL;
