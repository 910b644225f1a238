"""The scrinalia-workers command line, run as the real console entry in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from helpers import (
    ENV_DB_VARS,
    assert_one_line_error,
    claim,
    cli,
    finish,
    make_worker,
    nested_plans,
    put_schedule,
    set_next_run,
    tick,
)
from scrinalia_workers.gateway.statements import cli as statements
from scrinalia_workers.testkit.cluster import free_port


@pytest.fixture
def ocr(db):
    return make_worker(db)


def one(db, sql, *params):
    return db.execute(sql, params).fetchone()


# --- migrate ---------------------------------------------------------------------

# the newest migration, whatever it is: this test is about the command, not the schema
HEAD = sorted(
    p.name[: -len(".sql")]
    for p in (Path(__file__).resolve().parents[2] / "migrations").glob("*.sql")
    if not p.name.endswith(".rollback.sql")
)[-1]


def test_migrate_is_idempotent_and_rolls_back(empty_db_dsn):
    first = cli("migrate", dsn=empty_db_dsn)
    assert first.code == 0, first.err
    assert "applied 0001_ledger" in first.out and f"applied {HEAD}" in first.out
    again = cli("migrate", dsn=empty_db_dsn)
    assert again.code == 0, again.err
    assert "applied" not in again.out.replace("no migration to apply", "")
    assert f"already at the head ({HEAD})" in again.out
    back = cli("migrate", "--rollback", "--count", "1", "--json", dsn=empty_db_dsn)
    assert back.code == 0, back.err
    assert json.loads(back.out) == {"rolled_back": [HEAD]}
    forth = cli("migrate", "--json", dsn=empty_db_dsn)
    assert json.loads(forth.out) == {"applied": [HEAD], "schema_head": HEAD}


def test_count_without_rollback_is_a_usage_error(empty_db_dsn):
    assert_one_line_error(cli("migrate", "--count", "1", dsn=empty_db_dsn), 2, "--count goes with --rollback")


# --- enqueue ---------------------------------------------------------------------


def test_enqueue_prints_the_run_and_records_cli(db_dsn, db, ocr):
    r = cli("enqueue", "ocr", "--request", '{"preset": "fast"}', "--requested-by", "dba", dsn=db_dsn)
    assert r.code == 0, r.err
    run_id = one(db, "SELECT max(run_id) FROM scrinalia.archive_worker_runs")[0]
    assert f"run #{run_id} QUEUED (ocr, CLI)" in r.out
    assert one(
        db,
        "SELECT trigger::text, requested_by, request->>'preset' FROM scrinalia.archive_worker_runs WHERE run_id = %s",
        run_id,
    ) == ("CLI", "dba", "fast")


def test_enqueue_when_the_slot_is_busy_exits_3(db_dsn, db, ocr):
    first = cli("enqueue", "ocr", "--json", dsn=db_dsn)
    assert first.code == 0, first.err
    run_id = json.loads(first.out)["run_id"]
    busy = cli("enqueue", "ocr", dsn=db_dsn)
    assert_one_line_error(busy, 3, "[SW010]", f"run #{run_id} QUEUED", "hint:")
    assert one(db, "SELECT count(*) FROM scrinalia.archive_worker_runs")[0] == 1


def test_enqueue_unknown_worker(db_dsn, ocr):
    assert_one_line_error(cli("enqueue", "nope", dsn=db_dsn), 1, "[SW001]", "unknown worker 'nope'")


@pytest.mark.parametrize(
    "text, fragment",
    [
        ('{"preset": ', "--request is not valid JSON"),
        ("[1, 2]", "--request must be a JSON object, got list"),
    ],
)
def test_enqueue_malformed_json(db_dsn, db, ocr, text, fragment):
    assert_one_line_error(cli("enqueue", "ocr", "--request", text, dsn=db_dsn), 2, fragment)
    assert one(db, "SELECT count(*) FROM scrinalia.archive_worker_runs")[0] == 0


def test_enqueue_invalid_request_is_named_by_the_database(db_dsn, ocr):
    r = cli("enqueue", "ocr", "--request", '{"options": {"dpi": "high"}}', dsn=db_dsn)
    assert_one_line_error(r, 1, "[SW002]", "options.dpi must be an integer")


# --- schedule --------------------------------------------------------------------


def test_schedule_put_get_pause_resume_delete(db_dsn, db, ocr):
    put = cli(
        "schedule",
        "put",
        "ocr",
        "--cron",
        "0  2 * * 1-5",
        "--timezone",
        "Europe/Berlin",
        "--request",
        '{"options": {"lang": "eng"}}',
        dsn=db_dsn,
    )
    assert put.code == 0, put.err
    assert "schedule of ocr saved" in put.out and "0 2 * * 1-5" in put.out
    row = one(db, "SELECT cron, timezone, enabled, request FROM scrinalia.archive_worker_schedules")
    assert row == ("0 2 * * 1-5", "Europe/Berlin", True, {"options": {"lang": "eng"}})
    assert "not armed yet" in cli("schedule", "get", "ocr", dsn=db_dsn).out

    db.execute("UPDATE scrinalia.archive_worker_schedules SET next_run_at = '2030-01-07 01:00Z'")
    got = cli("schedule", "get", "ocr", dsn=db_dsn)
    assert "2030-01-07 02:00 CET (2030-01-07 01:00:00Z)" in got.out  # in the zone and in UTC

    assert cli("schedule", "pause", "ocr", dsn=db_dsn).code == 0
    assert one(db, "SELECT enabled FROM scrinalia.archive_worker_schedules")[0] is False
    assert json.loads(cli("schedule", "get", "ocr", "--json", dsn=db_dsn).out)["paused"] is True
    resumed = cli("schedule", "resume", "ocr", dsn=db_dsn)
    assert resumed.code == 0 and "resumed" in resumed.out
    assert one(db, "SELECT enabled, next_run_at FROM scrinalia.archive_worker_schedules") == (True, None)

    assert cli("schedule", "delete", "ocr", dsn=db_dsn).code == 0
    assert one(db, "SELECT count(*) FROM scrinalia.archive_worker_schedules")[0] == 0
    assert_one_line_error(cli("schedule", "get", "ocr", dsn=db_dsn), 1, "[SW005]", "no schedule")
    assert_one_line_error(cli("schedule", "pause", "ocr", dsn=db_dsn), 1, "[SW005]")


def test_schedule_put_disabled_and_default_zone(db_dsn, db, ocr):
    db.execute("SELECT scrinalia.set_default_timezone('America/Sao_Paulo')")
    assert cli("schedule", "put", "ocr", "--cron", "*/15 * * * *", "--disabled", dsn=db_dsn).code == 0
    assert one(db, "SELECT timezone, enabled FROM scrinalia.archive_worker_schedules") == ("America/Sao_Paulo", False)


def test_schedule_put_invalid_cron_names_the_field(db_dsn, db, ocr):
    r = cli("schedule", "put", "ocr", "--cron", "0 24 * * *", dsn=db_dsn)
    assert_one_line_error(r, 1, "[SW003]", "field 2 (hour)", "24 is out of range 0-23")
    assert_one_line_error(cli("schedule", "put", "ocr", "--cron", "@daily", dsn=db_dsn), 1, "[SW003]", "macros")
    assert one(db, "SELECT count(*) FROM scrinalia.archive_worker_schedules")[0] == 0


def test_schedule_put_unknown_zone_and_unknown_worker(db_dsn, ocr):
    r = cli("schedule", "put", "ocr", "--cron", "0 2 * * *", "--timezone", "Europe/Atlantis", dsn=db_dsn)
    assert_one_line_error(r, 1, "[SW004]", "Europe/Atlantis")
    r = cli("schedule", "put", "nope", "--cron", "0 2 * * *", dsn=db_dsn)
    assert_one_line_error(r, 1, "[SW001]", "unknown worker 'nope'")
    assert_one_line_error(cli("schedule", "get", "nope", dsn=db_dsn), 1, "[SW001]")


def test_schedule_put_bad_request_json(db_dsn, ocr):
    r = cli("schedule", "put", "ocr", "--cron", "0 2 * * *", "--request", "{oops}", dsn=db_dsn)
    assert_one_line_error(r, 2, "--request is not valid JSON")


# --- schedule import (put_schedules) ------------------------------------------------

SCHEDULES_YAML = """\
schedules:
  - worker_name: ocr
    cron: 0  2 * * 1-5
    timezone: Europe/Berlin
    request: {options: {lang: eng}}
  - worker_name: thumbs
    cron: "*/15 * * * *"
    enabled: false
"""


def test_schedule_import_a_yaml_file_then_again(db_dsn, db, ocr, tmp_path):
    make_worker(db, "thumbs")
    f = tmp_path / "schedules.yaml"
    f.write_text(SCHEDULES_YAML)
    dry = cli("schedule", "import", str(f), "--dry-run", dsn=db_dsn)
    assert dry.code == 0, dry.err
    assert "2 schedule(s) valid: 2 would be created, 0 replaced" in dry.out
    assert one(db, "SELECT count(*) FROM scrinalia.archive_worker_schedules")[0] == 0
    r = cli("schedule", "import", str(f), dsn=db_dsn)
    assert r.code == 0, r.err
    assert f"imported 2 schedule(s) from {f}: 2 created, 0 replaced" in r.out
    assert db.execute(
        "SELECT worker_name, cron, timezone, enabled, request, updated_by LIKE 'cli:%'"
        " FROM scrinalia.archive_worker_schedules ORDER BY 1"
    ).fetchall() == [
        ("ocr", "0 2 * * 1-5", "Europe/Berlin", True, {"options": {"lang": "eng"}}, True),
        ("thumbs", "*/15 * * * *", "UTC", False, {}, True),
    ]
    again = cli("schedule", "import", str(f), "--json", dsn=db_dsn)
    assert json.loads(again.out) == {"file": str(f), "created": 0, "replaced": 2, "dry_run": False}


def test_schedule_import_from_stdin_as_json(db_dsn, db, ocr):
    env = {k: v for k, v in os.environ.items() if k not in ENV_DB_VARS}
    p = subprocess.run(
        [sys.executable, "-m", "scrinalia_workers", "schedule", "import", "-", "--dsn", db_dsn],
        input='[{"worker_name": "ocr", "cron": "0 3 * * *"}]',
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    assert "imported 1 schedule(s) from <stdin>: 1 created" in p.stdout
    assert one(db, "SELECT cron FROM scrinalia.archive_worker_schedules") == ("0 3 * * *",)


def test_schedule_import_refuses_the_whole_file_naming_the_element(db_dsn, db, ocr, tmp_path):
    f = tmp_path / "s.json"
    f.write_text(
        json.dumps(
            [
                {"worker_name": "ocr", "cron": "0 3 * * *"},
                {"worker_name": "ocr", "cron": "0 24 * * *", "timezone": "UTC"},
            ]
        )
    )
    assert_one_line_error(
        cli("schedule", "import", str(f), dsn=db_dsn), 1, str(f), "[SW002]", "schedule #2: worker 'ocr' is named twice"
    )
    f.write_text(json.dumps([{"worker_name": "ocr", "cron": "0 24 * * *"}]))
    assert_one_line_error(
        cli("schedule", "import", str(f), dsn=db_dsn),
        1,
        f"{f}: [SW003]",
        "schedule #1 (worker 'ocr'): invalid cron",
        "field 2 (hour)",
    )
    assert one(db, "SELECT count(*) FROM scrinalia.archive_worker_schedules")[0] == 0


@pytest.mark.parametrize(
    "name,text,fragment",
    [
        ("s.json", "[{oops}]", "not valid JSON"),
        ("s.yaml", "- worker_name: ocr\n  cron: [", "not valid YAML"),
        ("s.json", '{"worker_name": "ocr", "cron": "0 2 * * *"}', "expected a list of schedules"),
        (
            "s.yaml",
            "- worker_name: ocr\n  cron: 0 2 * * *\n  request: {options: {day: 2026-01-01}}",
            "is not a JSON value (quote it in YAML)",
        ),
        (
            "s.json",
            '[{"worker_name": "ocr", "cron": "0 2 * * *", "request": {"options": {"x": NaN}}}]',
            "Out of range float values are not JSON compliant",
        ),
    ],
)
def test_schedule_import_a_bad_file_is_one_line(db_dsn, db, ocr, tmp_path, name, text, fragment):
    f = tmp_path / name
    f.write_text(text)
    assert_one_line_error(cli("schedule", "import", str(f), dsn=db_dsn), 1, str(f), fragment)
    assert one(db, "SELECT count(*) FROM scrinalia.archive_worker_schedules")[0] == 0
    assert_one_line_error(cli("schedule", "import", str(tmp_path / "missing.json"), dsn=db_dsn), 1, "cannot read it")


# --- status and runs -------------------------------------------------------------


def test_status_shows_agenda_counters_and_the_lock_apart(db_dsn, db, ocr):
    make_worker(db, "idle")
    put_schedule(db, "ocr", "0 2 * * *", "Europe/Berlin")
    db.execute("UPDATE scrinalia.archive_worker_schedules SET next_run_at = '2030-07-01 00:00Z'")
    db.execute("SELECT scrinalia.add_units('ocr', ARRAY['a', 'b', 'c'])")
    db.execute("SELECT scrinalia.mark_units_processed('ocr', ARRAY['a'])")

    text = cli("status", dsn=db_dsn)
    assert text.code == 0, text.err
    assert "NO scheduler holds the lock" in text.out
    agenda, counters = text.out.split("queue counters")
    ocr_line = next(ln for ln in agenda.splitlines() if ln.startswith("ocr "))
    assert "0 2 * * *" in ocr_line and "2030-07-01 02:00 CEST" in ocr_line and "2030-07-01 00:00:00Z" in ocr_line
    assert "unscheduled" in next(ln for ln in agenda.splitlines() if ln.startswith("idle "))
    assert next(ln for ln in counters.splitlines() if ln.startswith("ocr ")).split() == ["ocr", "2", "1"]

    # a scheduler holding the lock is named, with its pid
    pid = one(db, "SELECT pg_backend_pid()")[0]
    db.execute("SELECT pg_advisory_lock(scrinalia.scheduler_lock_key())")
    data = json.loads(cli("status", "--json", dsn=db_dsn).out)
    assert data["scheduler"]["lock_held"] is True and data["scheduler"]["holder_pid"] == pid
    assert {c["worker_name"]: (c["pending"], c["processed"]) for c in data["queue_counters"]} == {
        "ocr": (2, 1),
        "idle": (0, 0),
    }
    # what needs an operator first: the next due, then the rest by name (--all: all by name)
    assert [(a["worker_name"], a["focus"]) for a in data["agenda"]] == [("ocr", "next"), ("idle", "other")]
    assert data["agenda_more"] == 0 and data["agenda_totals"]["workers"] == 2
    everything = json.loads(cli("status", "--json", "--all", dsn=db_dsn).out)
    assert [a["worker_name"] for a in everything["agenda"]] == ["idle", "ocr"]
    assert f"lock held by pid {pid}" in cli("status", dsn=db_dsn).out


def test_runs_shows_attempts_retry_chain_and_truncated_errors(db_dsn, db, ocr):
    put_schedule(db, "ocr")
    tick(db)
    set_next_run(db, "ocr", "1 minute")
    tick(db)
    first = claim(db)
    finish(db, first[0], first[1], "FAILED", "disk full " + "x" * 200)
    retry = one(db, "SELECT run_id FROM scrinalia.create_retries()")[0]

    r = cli("runs", "ocr", dsn=db_dsn)
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    retry_line = next(ln for ln in lines if ln.startswith(f"{retry} "))
    assert "SCHEDULE" in retry_line and "2/3" in retry_line and f"retry of #{first[0]}" in retry_line
    failed_line = next(ln for ln in lines if ln.startswith(f"{first[0]} "))
    assert "FAILED" in failed_line and "disk full" in failed_line and "…" in failed_line
    assert "x" * 100 not in failed_line

    rows = json.loads(cli("runs", "--limit", "1", "--json", dsn=db_dsn).out)
    assert [x["run_id"] for x in rows] == [retry]
    assert rows[0]["retry_of"] == first[0] and rows[0]["not_before"] is not None
    assert_one_line_error(cli("runs", "nope", dsn=db_dsn), 1, "[SW001]")
    assert_one_line_error(cli("runs", "--limit", "0", dsn=db_dsn), 2, "--limit")


# --- cancel, settings, prune -------------------------------------------------------


def test_cancel(db_dsn, db, ocr):
    run_id = json.loads(cli("enqueue", "ocr", "--json", dsn=db_dsn).out)["run_id"]
    r = cli("cancel", str(run_id), dsn=db_dsn)
    assert r.code == 0, r.err
    assert f"run #{run_id} CANCELLED" in r.out
    assert one(db, "SELECT status::text FROM scrinalia.archive_worker_runs WHERE run_id = %s", run_id)[0] == "CANCELLED"
    assert_one_line_error(cli("cancel", str(run_id), dsn=db_dsn), 1, "[SW011]", "it is CANCELLED")
    assert_one_line_error(cli("cancel", "abc", dsn=db_dsn), 2, "RUN_ID", "'abc' is not a run id")


def test_settings_put(db_dsn, db, ocr):
    r = cli("settings", "put", "ocr", "--settings", '{"preset": "archival"}', dsn=db_dsn)
    assert r.code == 0, r.err
    assert one(db, "SELECT settings FROM scrinalia.archive_worker_settings")[0] == {"preset": "archival"}
    bad = cli("settings", "put", "ocr", "--settings", '{"preset": "nope"}', dsn=db_dsn)
    assert_one_line_error(bad, 1, "[SW002]", "unknown preset 'nope'")


def _succeeded_run(db, worker: str, trigger: str = "MANUAL") -> int:
    """One run of `worker` enqueued, claimed and finished SUCCEEDED: its id."""
    run_id = one(db, "SELECT run_id FROM scrinalia.enqueue(%s, '{}', %s)", worker, trigger)[0]
    got = claim(db)
    finish(db, got[0], got[1])
    return run_id


def test_prune(db_dsn, db, ocr):
    ids = [_succeeded_run(db, "ocr", "CLI") for _ in range(3)]
    db.execute(
        "UPDATE scrinalia.archive_worker_runs SET finished_at = finished_at - interval '40 days'"
        " WHERE run_id = ANY (%s)",
        (ids[:2],),
    )
    r = cli("prune", "--older-than", "30 days", "--batch", "3", dsn=db_dsn)
    assert r.code == 0, r.err
    assert "deleted 2 finished run(s)" in r.out
    assert [x[0] for x in db.execute("SELECT run_id FROM scrinalia.archive_worker_runs").fetchall()] == ids[2:]
    assert_one_line_error(cli("prune", "--older-than", "1 hour", dsn=db_dsn), 1, "[SW002]", "at least one day")
    assert_one_line_error(cli("prune", "--older-than", "soon", dsn=db_dsn), 1, "[22007]")


# --- configuration and usage -------------------------------------------------------


def test_no_database_configured():
    assert_one_line_error(cli("status"), 1, "no database configured", "DATABASE_URL")


def test_database_url_is_used(db_dsn, ocr):
    r = cli("runs", env={"DATABASE_URL": db_dsn})
    assert r.code == 0, r.err
    assert r.out.startswith("id")


def test_unreachable_database():
    dsn = f"host=127.0.0.1 port={free_port()} dbname=x connect_timeout=3"
    assert_one_line_error(cli("status", dsn=dsn), 1, "cannot connect to the database")


def test_malformed_dsn():
    assert_one_line_error(cli("status", dsn="not a dsn"), 1, "invalid connection string")


def test_usage_errors_are_one_line():
    assert_one_line_error(cli("frobnicate"), 2, "invalid choice: 'frobnicate'")
    assert_one_line_error(cli("schedule", "put", "ocr"), 2, "--cron")
    assert cli("--help").code == 0


def test_delegated_daemons_never_trace_back():
    # scheduler/runner/demo are other modules; whether or not they are installed
    # yet, the CLI answers without a traceback.
    for argv in (["scheduler", "--help"], ["runner", "--help"]):
        r = cli(*argv)
        assert "Traceback" not in r.err
        assert r.code == 0 or r.err.startswith("scrinalia-workers: error: "), r.err


def test_an_unmigrated_database_says_so(empty_db_dsn):
    assert_one_line_error(cli("status", dsn=empty_db_dsn), 1, "not migrated", "scrinalia-workers migrate")


def test_a_login_without_the_group_is_told(db_dsn, db, ocr, role_logins):
    reader = psycopg.conninfo.make_conninfo(db_dsn, user=role_logins["reader"])
    assert cli("status", dsn=reader).code == 0  # the reader may read
    r = cli("enqueue", "ocr", dsn=reader)
    assert_one_line_error(r, 1, "[42501]", "permission denied", "lacks the group")
    assert one(db, "SELECT count(*) FROM scrinalia.archive_worker_runs")[0] == 0


def test_runs_of_one_worker_are_its_live_run_then_its_newest_finished(db_dsn, db, ocr):
    """runs WORKER reads the live run (the slot) and the finished ones (their index)
    separately: merged newest first, limited, and nobody else's."""
    make_worker(db, "other")
    done = []
    for _ in range(4):
        done.append(_succeeded_run(db, "ocr"))
        _succeeded_run(db, "other")
    live = one(db, "SELECT run_id FROM scrinalia.enqueue('ocr')")[0]
    rows = json.loads(cli("runs", "ocr", "--limit", "3", "--json", dsn=db_dsn).out)
    assert [(x["run_id"], x["status"]) for x in rows] == [
        (live, "QUEUED"),
        (done[3], "SUCCEEDED"),
        (done[2], "SUCCEEDED"),
    ]
    rows = json.loads(cli("runs", "ocr", "--json", dsn=db_dsn).out)
    assert [x["run_id"] for x in rows] == [live, *reversed(done)]
    # the finished half is an index scan of the worker's finished runs, not of the ledger:
    # the plan of scrinalia.worker_runs()'s own query, as auto_explain reports it
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        plans = nested_plans(conn)
        conn.execute("SET enable_seqscan = off")
        conn.execute(statements.WORKER_RUNS, {"w": "ocr", "n": 3}).fetchall()
    inner = [p for p in plans if "worker_run_history" in p and "scrinalia.worker_runs(" not in p]
    assert len(inner) == 1, plans
    assert "ix_worker_runs_finished" in inner[0] and "uq_worker_run_active" in inner[0], inner[0]
