-- PostgreSQL cannot drop an enum value: rebuild the type without SCHEDULE.
-- Refuses (via the cast) while any run still carries the SCHEDULE trigger.
ALTER TYPE scrinalia.run_trigger RENAME TO run_trigger_0002;
CREATE TYPE scrinalia.run_trigger AS ENUM ('MANUAL', 'CLI');
ALTER TABLE scrinalia.archive_worker_runs
    ALTER COLUMN trigger TYPE scrinalia.run_trigger USING trigger::text::scrinalia.run_trigger;
DROP TYPE scrinalia.run_trigger_0002;
