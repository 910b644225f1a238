-- The lateness goes with its column; the code that reads it goes with the rollback (the
-- release below re-creates its own with its migrate, and reads the lateness from the
-- runs as before).
ALTER TABLE scrinalia.latest_period_tally DROP COLUMN lateness_seconds;
