"""A standby killed while its lock session waits in the lock's queue: the server reads
nothing from a client whose session waits inside a statement, so without a check the
dead session stayed queued (a session more, and first in line for the lock) until it
got the lock. Its sessions now end soon after the process died."""

from __future__ import annotations

import psycopg
import pytest

from scrinalia_workers.testkit.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.reliability]

LOCK_SESSIONS = "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'scrinalia-scheduler lock'"


def test_a_killed_standbys_lock_session_leaves_the_queue(db, db_dsn, role_logins, procs):
    if db.execute("SELECT current_setting('server_version_num')::int < 140000").fetchone()[0]:
        pytest.skip("PostgreSQL 13 has no client_connection_check_interval")
    sched = psycopg.conninfo.make_conninfo(db_dsn, user=role_logins["scheduler"])
    a = procs.scheduler(sched, "--standby-retry", "0.3", "--name", "a")
    a.wait_event("lock acquired")
    b = procs.scheduler(sched, "--standby-retry", "0.3", "--name", "b")
    b.wait_event("standby")
    wait_for(lambda: db.execute(LOCK_SESSIONS).fetchone()[0] == 2, timeout=10, what="both lock sessions")
    b.kill()
    wait_for(lambda: db.execute(LOCK_SESSIONS).fetchone()[0] == 1, timeout=5, what="the dead standby's session gone")
    assert a.running()
