-- Which run a run made by hand re-runs (scrinalia.rerun, sql/32_rerun.sql): a table of
-- its own rather than a column of the ledger, whose row type claim_next and the other
-- functions return: a column more changes their result type, and a daemon of an earlier
-- release whose statement was prepared against the old one then fails ("cached plan
-- must not change result type"). No foreign key either: one would refuse a TRUNCATE of
-- the ledger. The ledger's triggers (32_rerun.sql) delete a link with either of its
-- runs (prune_runs deletes an old run without asking what re-ran it: the re-run stays,
-- unlinked) and empty the table with the ledger.
-- depends: 0011_run_limits

CREATE TABLE scrinalia.archive_run_reruns (
    run_id   bigint PRIMARY KEY,
    rerun_of bigint NOT NULL
);

-- a run's re-runs, for the history's rerun_by and the delete trigger
CREATE INDEX ix_run_reruns_rerun_of ON scrinalia.archive_run_reruns (rerun_of);
