-- The triggers first: a daemon finishing a run meanwhile must not meet a trigger whose
-- tables are gone. The release below counts the ledger itself.
DROP TRIGGER IF EXISTS tally_insert ON scrinalia.archive_worker_runs;
DROP TRIGGER IF EXISTS tally_update ON scrinalia.archive_worker_runs;
DROP TRIGGER IF EXISTS tally_delete ON scrinalia.archive_worker_runs;
DROP TRIGGER IF EXISTS tally_truncate ON scrinalia.archive_worker_runs;
-- The view of the counts (sql/88_alerts.sql) reads the tallies: it goes first.
DROP VIEW IF EXISTS scrinalia.ledger_counts;
DROP TABLE scrinalia.tally_fold;
DROP TABLE scrinalia.latest_period_tally;
DROP TABLE scrinalia.run_tally_delta;
DROP TABLE scrinalia.retry_tally;
DROP TABLE scrinalia.run_tally;
