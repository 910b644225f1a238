-- The masks are derived from the stored crons: nothing is lost.
DROP TABLE scrinalia.archive_cron_masks;
