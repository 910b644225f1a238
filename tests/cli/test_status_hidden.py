"""What PostgreSQL hides of another login's session from a schema owner without
pg_read_all_stats (the lock holder's application, client and start) is said to be
hidden, never printed as None: by `status` and by a standby's log line."""

from __future__ import annotations

from datetime import UTC, datetime

from helpers import cli
from scrinalia_workers.presentation.agenda import scheduler_line as _scheduler_line
from scrinalia_workers.text import HIDDEN

HOLDER = {
    "lock_held": True,
    "holder_pid": 4242,
    "holder_role": "archive_scheduler",
    "holder_client": None,
    "heartbeat_pid": 4242,
    "last_tick_at": None,
    "last_tick_by": None,
    "ticks": 0,
}


def test_a_hidden_holder_is_said_to_be_hidden():
    line = _scheduler_line({**HOLDER, "holder_application": None, "holder_backend_start": None})
    assert "None" not in line and line.count(HIDDEN) == 2, line


def test_a_visible_holder_is_shown_as_it_is():
    start = datetime(2026, 12, 4, 17, 0, tzinfo=UTC)
    line = _scheduler_line({**HOLDER, "holder_application": "scrinalia-scheduler lock", "holder_backend_start": start})
    assert "hidden" not in line and "scrinalia-scheduler lock" in line and "connected 2026-12-04 17:00:00Z" in line
    assert "no application name" in _scheduler_line({**HOLDER, "holder_application": "", "holder_backend_start": start})


def test_status_prints_no_none_for_a_holder(db_dsn, connect_as):
    holder = connect_as("scheduler")
    assert holder.execute("SELECT pg_try_advisory_lock(scrinalia.scheduler_lock_key())").fetchone()[0]
    r = cli("status", dsn=db_dsn)
    assert r.code == 0, r.err
    line = next(x for x in r.out.splitlines() if "lock held by" in x)
    assert "None" not in line, line
