-- The kept configs go; nothing is lost: the release below resolves every run's config
-- from the catalogue, as the tick does for a worker without one.
DROP TABLE scrinalia.schedule_configs;
DROP SEQUENCE scrinalia.config_layers_stamp_seq;
