-- ADR 0015: WorkerRunTrigger gains SCHEDULE.
-- depends: 0001_ledger
-- transactional: false
ALTER TYPE scrinalia.run_trigger ADD VALUE IF NOT EXISTS 'SCHEDULE';
