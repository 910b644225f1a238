"""No text read from the database starts a line of its own in what the CLI prints.

A set-aside reason, a skip reason, a run's error, a description, who updated a
schedule or ticked last: each is planted with a newline followed by a line that
reads like the CLI's own ("scheduler: healthy ..."). Every command that shows it,
plain and the live screen, shows the newline as an escape inside its own line."""

from __future__ import annotations

import pytest
from psycopg.types.json import Jsonb

from helpers import cli, make_worker
from scrinalia_workers.cli import watch

FORGED = "scheduler: healthy, holding the lock (FORGED)"
PAYLOAD = f"zone gone\n{FORGED}"


@pytest.fixture
def forged(db):
    make_worker(db, "ocr")
    db.execute("UPDATE scrinalia.archive_workers SET description = %s WHERE worker_name = 'ocr'", (PAYLOAD,))
    db.execute(
        "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone, request, updated_by,"
        " next_run_at, arm_error, arm_error_since, arm_retry_at, last_skipped_at, last_skip_reason)"
        " VALUES ('ocr', '* * * * *', 'UTC', %s, %s, now() + interval '1 hour', %s, now(),"
        " now() + interval '1 hour', now(), %s)",
        (Jsonb({"options": {"lang": PAYLOAD}}), PAYLOAD, PAYLOAD, PAYLOAD),
    )
    db.execute("UPDATE scrinalia.scheduler_state SET last_tick_by = %s, last_tick_at = now()", (PAYLOAD,))
    db.execute(
        "INSERT INTO scrinalia.archive_worker_runs (worker_name, trigger, status, error, created_at, started_at,"
        " finished_at, scheduled_for) VALUES ('ocr', 'MANUAL', 'FAILED', %s, now(), now(), now(), NULL),"
        " ('ocr', 'SCHEDULE', 'FAILED', %s, now(), now(), now(), date_trunc('minute', now()))",
        (PAYLOAD, PAYLOAD),
    )
    return db


def _forged_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.lstrip().startswith(FORGED)]


COMMANDS = [
    ["status"],
    ["runs"],
    ["runs", "ocr"],
    ["runs", "ocr", "--timeline"],
    ["schedule", "get", "ocr"],
    ["worker", "show", "ocr"],
    ["worker", "list"],
]


@pytest.mark.parametrize("argv", COMMANDS, ids=" ".join)
def test_no_command_prints_a_line_the_database_wrote(forged, db_dsn, argv):
    r = cli(*argv, dsn=db_dsn)
    assert r.code == 0, r.err
    assert _forged_lines(r.out + r.err) == [], r.out


def test_status_shows_the_health_reason_newline_as_an_escape(forged, db_dsn):
    r = cli("status", dsn=db_dsn)
    health = [line for line in r.out.splitlines() if line.startswith("health: ")]
    assert len(health) == 1, r.out
    assert f"zone gone\\n{FORGED}" in health[0], health[0]
    scheduler = [line for line in r.out.splitlines() if line.startswith("scheduler: ")]
    assert len(scheduler) == 1 and f"zone gone\\n{FORGED}" in scheduler[0], r.out


def test_the_live_screen_prints_no_line_the_database_wrote(forged, connect_as):
    screen = watch.render(connect_as("reader"), width=400)
    assert _forged_lines(screen) == [], screen
    health = screen.splitlines()[1]
    assert health.startswith("scheduler: NOT HEALTHY: ") and f"zone gone\\n{FORGED}" in health, screen


def test_the_timeline_shows_an_error_newline_as_an_escape(forged, connect_as):
    text = watch.timeline(connect_as("reader"), "ocr", width=400)
    assert _forged_lines(text) == [] and f"zone gone\\n{FORGED}" in text, text
