-- Each worker's latest finished period keeps how late its first attempt was enqueued
-- (sql/86_tallies.sql computes it with the period; worker_metrics() reads it there
-- instead of a probe of the ledger per scheduled worker, which cost a scrape more than
-- its whole rest on a large catalogue). A column added last, empty: the migrate that
-- installs the code rebuilds the tallies and fills it; until then, and for a row the
-- release below's fold writes (its seven columns, this one left NULL), NULL means
-- "read it from the run", which is what the release below does for every worker.
-- depends: 0015_run_catch_up_column

ALTER TABLE scrinalia.latest_period_tally ADD COLUMN lateness_seconds double precision;
