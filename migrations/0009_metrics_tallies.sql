-- The tallies the metrics read instead of counting the ledger (sql/86_tallies.sql keeps
-- them and says how): the finished runs per (worker, status, trigger), the finished
-- retries per worker, each worker's latest finished scheduled period, and the deltas
-- the ledger's triggers append until a fold adds them in. Empty here: the migrate that
-- installs the triggers (apply_code, same release) builds them from the ledger.
-- depends: 0008_metrics_indexes

CREATE TABLE scrinalia.run_tally (
    worker_name text NOT NULL,
    status      scrinalia.run_status NOT NULL,
    trigger     scrinalia.run_trigger NOT NULL,
    runs        bigint NOT NULL,
    PRIMARY KEY (worker_name, status, trigger)
);

CREATE TABLE scrinalia.retry_tally (
    worker_name text PRIMARY KEY,
    retries     bigint NOT NULL
);

-- Append-only between folds, no index: a statement that finishes runs appends a row
-- per (status, trigger, retry, runs, period) with its workers in an array, a fold
-- deletes what it read. runs: what each worker's count moves by; 0: no count moved,
-- only the worker's periods (period = true).
CREATE TABLE scrinalia.run_tally_delta (
    status       scrinalia.run_status NOT NULL,
    trigger      scrinalia.run_trigger NOT NULL,
    retry        boolean NOT NULL,
    runs         integer NOT NULL,
    period       boolean NOT NULL,
    worker_names text[] NOT NULL
);

CREATE TABLE scrinalia.latest_period_tally (
    worker_name   text PRIMARY KEY,
    scheduled_for timestamptz,
    run_ids       bigint[],
    attempts      integer,
    last_status   scrinalia.run_status,
    last_error    text,
    finished_at   timestamptz
);

-- One row: whoever locks it folds; the others read the deltas as they are.
CREATE TABLE scrinalia.tally_fold (
    one boolean PRIMARY KEY DEFAULT true CHECK (one)
);
INSERT INTO scrinalia.tally_fold DEFAULT VALUES;
