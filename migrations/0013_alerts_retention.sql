-- What the scheduler's pass keeps for its two chores, pushed alerts and retention
-- (sql/88_alerts.sql, sql/85_retention.sql). New tables only: the ledger and what an
-- earlier release's daemons read are not touched.
-- * announced_alerts: the alerts already sent on the channel scrinalia_alerts, one row
--   per alert (kind, worker, its identity): a row goes when its alert clears, so the
--   table holds at most the current alerts, and one that comes back is sent again.
-- * scheduler_chores: one row, the instants that pace the chores (the alerts' last
--   check; the retention's sweep under way and the last one finished), so that a
--   pace survives a restart or a takeover and a test moves it as data.
-- depends: 0012_rerun

CREATE TABLE scrinalia.announced_alerts (
    kind          text NOT NULL,
    worker_name   text NOT NULL DEFAULT '',
    identity      text NOT NULL DEFAULT '',
    announced_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (kind, worker_name, identity)
);

CREATE TABLE scrinalia.scheduler_chores (
    id                 boolean PRIMARY KEY DEFAULT true CHECK (id),
    alerts_checked_at  timestamptz,
    -- the retention's sweep under way (NULL: none): its cut-off, its start, where its next
    -- batch begins in the ledger (a run id), what it removed so far
    prune_cutoff       timestamptz,
    prune_position     bigint,
    prune_started_at   timestamptz,
    prune_removed      bigint NOT NULL DEFAULT 0,
    -- the last sweep finished
    pruned_at          timestamptz,
    pruned_cutoff      timestamptz,
    pruned_runs        bigint
);
INSERT INTO scrinalia.scheduler_chores DEFAULT VALUES;
