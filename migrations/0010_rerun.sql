-- A run made by hand to re-run an ended one (scrinalia.rerun, sql/32_rerun.sql) names
-- it. Nullable, no default: adding it rewrites nothing, and an earlier release's
-- daemons, which never write it, keep working. ON DELETE SET NULL: prune_runs deletes
-- an old run without asking what re-ran it; the re-run stays, its link gone.
-- Partial index: the history's "re-run by" looks a run's re-runs up; the runs nobody
-- re-ran, nearly all, are no entry of it. The key's check and the index read the
-- ledger once, writes held back meanwhile: about a second per million runs.
-- depends: 0009_metrics_tallies

ALTER TABLE scrinalia.archive_worker_runs
    ADD COLUMN rerun_of bigint REFERENCES scrinalia.archive_worker_runs ON DELETE SET NULL;

CREATE INDEX ix_worker_runs_rerun_of
    ON scrinalia.archive_worker_runs (rerun_of)
    WHERE rerun_of IS NOT NULL;
