-- The config a worker's scheduled runs get, kept for the tick: it copies it instead of
-- resolving the catalogue's layers for every run it enqueues (resolve_configs(): one
-- config_of() per distinct combination of layers, so one per run on a catalogue whose
-- workers differ). One row per worker. `layers_stamp` is renewed, from a sequence, by
-- every change of the worker's layers (its default_config and presets, its settings:
-- sql/10_catalogue.sql's triggers); the tick fills the rest, `stamp` being the
-- layers_stamp its config was resolved under. A kept config holds while its stamp is
-- the layers_stamp, its request the schedule's and its rule config_rule() (the source
-- of the functions that resolve); otherwise the tick resolves afresh and keeps that. So
-- a change committed while a tick resolved in an older snapshot leaves a kept config no
-- tick uses. A new table: nothing an earlier release's daemons read changes shape. The
-- migrate that installs the code adds the row of every worker without one.
-- depends: 0016_period_lateness

CREATE SEQUENCE scrinalia.config_layers_stamp_seq;

CREATE TABLE scrinalia.schedule_configs (
    worker_name    text PRIMARY KEY REFERENCES scrinalia.archive_workers ON DELETE CASCADE,
    layers_stamp   bigint NOT NULL,
    stamp          bigint,
    rule           text,
    request        jsonb,
    config         jsonb,
    config_sources jsonb
);
