-- What each stored cron selects, as bit masks, so that the tick can check that every
-- next instant it is handed is an occurrence of its schedule's cron (sql/50_tick.sql)
-- with a few integer operations per schedule instead of parsing the cron again. Keyed
-- by the cron text as archive_worker_schedules stores it (single spaces); written by
-- write_schedules() and filled for the schedules already stored when migrate
-- re-installs the code (sql/20_cron.sql). A cron missing here costs the tick the slow
-- check (cron_fires_at), never a wrong answer. A cache, not a rule: nothing else reads
-- it, so the previous release's code runs on unchanged beside it.
-- Bit v of a mask is set when the field selects v (day-of-week: 0..6, 7 read as 0).
-- depends: 0006_ledger_indexes

CREATE TABLE scrinalia.archive_cron_masks (
    cron text PRIMARY KEY,
    minutes bigint NOT NULL,
    hours integer NOT NULL,
    doms bigint NOT NULL,
    months integer NOT NULL,
    dows integer NOT NULL,
    -- Vixie: the day fields are ANDed when either starts with '*', else ORed
    day_and boolean NOT NULL,
    -- the hour field is exactly '*': both passes of a fall-back fold fire
    hour_star boolean NOT NULL
);

-- The due query (due_schedules: ORDER BY next_run_at NULLS FIRST, worker_name LIMIT
-- one chunk) read in its own order, so that each chunk of a backlog reads its chunk
-- rather than sorting all that is still due: it replaces the index of next_run_at
-- alone, which serves everything that one did (a range or an equality on next_run_at).
-- The strongest lock first (as 0006): a daemon holding a weaker one and asking for more
-- must not deadlock with the migration.
LOCK TABLE scrinalia.archive_worker_schedules IN ACCESS EXCLUSIVE MODE;
CREATE INDEX ix_worker_schedules_due_order
    ON scrinalia.archive_worker_schedules (next_run_at NULLS FIRST, worker_name)
    WHERE enabled;
DROP INDEX scrinalia.ix_worker_schedules_due;
