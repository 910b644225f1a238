-- A runner whose every handler thread is held by a run told to stop (cancelled, past
-- its maximum run time, its lease lost) says so here besides its log, so that an
-- operator's stack sees it: current_alerts() RUNNER_STUCK, the exporter's
-- scrinalia_runner_stall series (sql/38_runner_stalls.sql). One row per login and
-- runner id (each login's runners apart: one cannot squat another's ids), written only
-- through those functions. A new table: nothing an earlier release's daemons read is
-- touched.
-- depends: 0013_alerts_retention

CREATE TABLE scrinalia.runner_stalls (
    login         name NOT NULL DEFAULT session_user,
    runner        text NOT NULL,
    run_ids       bigint[] NOT NULL,
    threads       integer NOT NULL,
    stuck_since   timestamptz NOT NULL,
    -- when the runner exits (3) unless one of the handlers returns first
    exits_at      timestamptz NOT NULL,
    -- it did exit (3), its threads still held
    exited_at     timestamptz,
    reported_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (login, runner)
);
