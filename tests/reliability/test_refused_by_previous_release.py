"""A REFUSED tick decision read by the previous release's scheduler (git archive
PREVIOUS): during a rolling deploy it calls this release's tick(), which may answer a
decision value it has never seen. It must neither crash nor stall: the refused schedule
is set aside (not enqueued, not advanced), the others run once each.

The disagreement is made on purpose: in this database one cron's stored masks select
nothing (so that every instant of it reaches the slow check) and the slow check
refuses it, as they would if the SQL and that release's cron disagreed on it."""

from __future__ import annotations

import sys

import psycopg
import pytest

from scrinalia_workers import __version__
from scrinalia_workers.admin import migrate as m
from scrinalia_workers.testkit.waiting import wait_for
from test_rolling_upgrade import PREVIOUS, _env, _migrate_cli, previous  # noqa: F401 (a fixture)

pytestmark = pytest.mark.slow

POISONED = "0 0 1 1 *"
GOOD = "0 0 2 1 *"
DISAGREE = f"""
INSERT INTO scrinalia.archive_cron_masks VALUES ('{POISONED}', 0, 0, 0, 0, 0, true, false);
CREATE OR REPLACE FUNCTION scrinalia.tick_instant_refusal(p_cron text, p_zone text, p_at timestamptz)
RETURNS text LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF p_cron = '{POISONED}' THEN
        RETURN 'the tick refused ' || p_at || ' (a disagreement made by the test)';
    END IF;
    RETURN NULL;
END $$;
"""


def test_the_previous_scheduler_reads_a_refusal_and_goes_on(previous, empty_db_dsn, procs, tmp_path):  # noqa: F811
    dsn = empty_db_dsn
    handlers = tmp_path / "handlers"
    handlers.mkdir()
    old = _env(previous, handlers)
    _migrate_cli(dsn, old)  # the previous release's own migrate
    with psycopg.connect(dsn, autocommit=True) as db:
        db.execute("INSERT INTO scrinalia.archive_workers (worker_name) VALUES ('p'), ('g1'), ('g2')")
        argv = [sys.executable, "-m", "scrinalia_workers.scheduler", "--dsn", dsn, "--json"]
        sched = procs.start([*argv, "--max-sleep", "0.3", "--name", f"old-{previous.name}"], env=old)
        sched.wait_event("lock acquired", timeout=30)
        m.migrate(dsn)  # this release's code under the old scheduler (a release at the same head: the code alone)
        assert db.execute("SELECT scrinalia.installed_release()").fetchone()[0] == __version__
        db.execute(DISAGREE)
        db.execute(
            "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone, next_run_at)"
            " VALUES ('p', %s, 'UTC', now() - interval '1 minute'), ('g1', %s, 'UTC', now() - interval '1 minute'),"
            " ('g2', %s, 'UTC', now() - interval '1 minute')",
            (POISONED, GOOD, GOOD),
        )
        was = db.execute(
            "SELECT next_run_at FROM scrinalia.archive_worker_schedules WHERE worker_name = 'p'"
        ).fetchone()
        db.execute("NOTIFY scrinalia_scheduler, 'schedule'")
        wait_for(
            lambda: db.execute("SELECT count(*) FROM scrinalia.archive_worker_runs").fetchone()[0] == 2,
            20,
            what="the good schedules enqueued",
        )
        wait_for(lambda: any(e.get("worker") == "p" for e in sched.events), 10, what="the old scheduler's line about p")
        # p is set aside until arm_retry_at: no pass sees it due again meanwhile (no loop)
        runs = db.execute("SELECT worker_name FROM scrinalia.archive_worker_runs ORDER BY worker_name").fetchall()
        assert runs == [("g1",), ("g2",)]
        p = db.execute(
            "SELECT next_run_at, arm_error IS NOT NULL, arm_retry_at > now()"
            " FROM scrinalia.archive_worker_schedules WHERE worker_name = 'p'"
        ).fetchone()
        assert p == (was[0], True, True)
        lines = [e for e in sched.events if e.get("worker") == "p"]
        assert len(lines) == 1 and "refused" in (lines[0].get("reason") or ""), lines
        assert sched.popen.poll() is None, sched.tail()  # still running
        assert procs.stop_all([sched], timeout=30) == [0]
        assert not any("Traceback" in line for line in sched.raw)
