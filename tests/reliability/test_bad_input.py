"""Scenario A: bad input through every SQL function and the CLI.

Each refusal must carry a SQLSTATE of the right class (SW0xx for our own checks,
22xxx for a value PostgreSQL itself cannot read) and a message a person can act on,
and must write nothing: every scrinalia table is fingerprinted (row count + md5 of
all rows) before and after.
"""

from __future__ import annotations

import re
import subprocess
import sys

import psycopg
import pytest
from psycopg.types.json import Jsonb

from bad_input_corpus import INVALID_ZONES, bad_requests, hostile_strings, invalid_crons
from helpers import claim, make_worker, put_schedule
from scrinalia_workers import cron


def refusal(conn, sql: str, params=()) -> psycopg.Error:
    """Runs sql, which must fail; returns the error."""
    try:
        conn.execute(sql, params)
    except psycopg.Error as e:
        return e
    raise AssertionError(f"accepted: {sql} {params!r}")


def assert_class(e: psycopg.Error, expected: str, what: str = "") -> None:
    """expected: a full SQLSTATE ('SW003') or a class prefix ('22')."""
    assert e.sqlstate is not None, f"{what}: no SQLSTATE: {e}"
    assert e.sqlstate.startswith(expected), f"{what}: SQLSTATE {e.sqlstate}, expected {expected}: {e}"
    msg = e.diag.message_primary or ""
    assert msg and len(msg) < 600, f"{what}: message empty or unbounded ({len(msg)} chars)"


@pytest.fixture
def world(db):
    make_worker(db)
    put_schedule(db, "ocr", "0 2 * * *", "Europe/Berlin")
    return db


def test_invalid_cron_corpus_is_refused_by_sql_and_python(world, fingerprint):
    corpus = invalid_crons()
    assert len(corpus) >= 300
    before = fingerprint(world)
    for cat, expr in corpus:
        with pytest.raises(cron.CronError):
            cron.validate(expr)
        e = refusal(world, "SELECT scrinalia.validate_cron(%s)", (expr,))
        assert_class(e, "SW003", f"{cat} {expr!r}")
        assert e.diag.message_primary.startswith("invalid cron"), e.diag.message_primary
        e = refusal(world, "SELECT scrinalia.put_schedule('ocr', %s, 'UTC')", (expr,))
        assert_class(e, "SW003", f"put_schedule {cat} {expr!r}")
    assert fingerprint(world) == before
    # the stored schedule is the one saved before, untouched
    assert world.execute("SELECT cron, timezone FROM scrinalia.archive_worker_schedules").fetchall() == [
        ("0 2 * * *", "Europe/Berlin")
    ]


def test_invalid_cron_messages_name_the_field(world):
    for expr, field in [
        ("0 24 * * *", "field 2 (hour)"),
        ("0 0 * * MON#2", "field 5 (day-of-week)"),
        ("*/0 * * * *", "field 1 (minute)"),
        ("0 0 0 * *", "field 3 (day-of-month)"),
    ]:
        e = refusal(world, "SELECT scrinalia.validate_cron(%s)", (expr,))
        assert field in e.diag.message_primary, e.diag.message_primary


def test_unknown_zones_are_refused(world, fingerprint):
    before = fingerprint(world)
    for z in INVALID_ZONES:
        with pytest.raises(cron.ZoneError):
            cron.validate_timezone(z)
        for sql in (
            "SELECT scrinalia.validate_timezone(%s)",
            "SELECT scrinalia.put_schedule('ocr', '0 3 * * *', %s)",
            "SELECT scrinalia.set_default_timezone(%s)",
        ):
            assert_class(refusal(world, sql, (z,)), "SW004", f"{sql} {z!r}")
    assert fingerprint(world) == before


@pytest.mark.parametrize("what,request_body", bad_requests(), ids=[w for w, _ in bad_requests()])
def test_malformed_requests_are_refused_everywhere(world, fingerprint, what, request_body):
    before = fingerprint(world)
    for sql in (
        "SELECT scrinalia.put_schedule('ocr', '0 3 * * *', 'UTC', %s)",
        "SELECT scrinalia.enqueue('ocr', %s)",
        "SELECT scrinalia.put_settings('ocr', %s)",
    ):
        e = refusal(world, sql, (Jsonb(request_body),))
        assert_class(e, "SW002", f"{what}: {sql}")
        assert "ocr" in e.diag.message_primary
    if what.startswith("oversized"):
        assert "65536" in e.diag.message_primary
    assert fingerprint(world) == before


def test_json_nul_escape_is_refused_by_postgresql(world, fingerprint):
    before = fingerprint(world)
    e = refusal(world, "SELECT scrinalia.enqueue('ocr', %s)", (Jsonb({"options": {"lang": "p\x00r"}}),))
    assert_class(e, "22", "\\u0000 in jsonb")  # 22P05 untranslatable_character
    assert fingerprint(world) == before


WRONG_TYPES = [
    ("SELECT scrinalia.enqueue('ocr', '{}', %s)", ("SCHEDULE",), "SW002"),
    ("SELECT scrinalia.enqueue('ocr', '{}', %s)", ("BOGUS",), "22"),
    ("SELECT scrinalia.enqueue('ocr', '{}', NULL)", (), "SW002"),
    ("SELECT scrinalia.enqueue('ocr', %s::jsonb)", ("{not json",), "22"),
    ("SELECT scrinalia.put_schedule('ocr', '0 3 * * *', 'UTC', '{}', NULL)", (), "SW002"),
    ("SELECT scrinalia.put_schedule('ocr', '0 3 * * *', 'UTC', '{}', %s::boolean)", ("maybe",), "22"),
    ("SELECT scrinalia.put_schedule('ocr', NULL)", (), "SW003"),
    ("SELECT scrinalia.set_schedule_enabled('ocr', NULL)", (), "SW002"),
    ("SELECT scrinalia.heartbeat(1, %s::uuid)", ("not-a-uuid",), "22"),
    ("SELECT scrinalia.heartbeat(1, gen_random_uuid())", (), "SW020"),
    ("SELECT scrinalia.finish(1, gen_random_uuid(), 'RUNNING')", (), "SW021"),
    ("SELECT scrinalia.finish(1, gen_random_uuid(), 'CANCELLED')", (), "SW021"),
    ("SELECT scrinalia.finish(1, gen_random_uuid(), %s::scrinalia.run_status)", ("DONE",), "22"),
    ("SELECT scrinalia.finish(1, gen_random_uuid(), NULL)", (), "SW021"),
    ("SELECT * FROM scrinalia.claim_next('r1', %s::interval)", ("-1 minute",), "SW022"),
    ("SELECT * FROM scrinalia.claim_next('r1', %s::interval)", ("0 seconds",), "SW022"),
    ("SELECT * FROM scrinalia.claim_next('r1', %s::interval)", ("2 days",), "SW022"),
    ("SELECT * FROM scrinalia.claim_next('r1', %s::interval)", ("forever",), "22"),
    ("SELECT * FROM scrinalia.claim_next('r1', NULL)", (), "SW022"),
    ("SELECT * FROM scrinalia.claim_next(NULL)", (), "SW022"),
    ("SELECT scrinalia.cancel_run(-1)", (), "SW011"),
    ("SELECT scrinalia.cancel_run(%s::bigint)", ("1e30",), "22"),
    ("SELECT * FROM scrinalia.due_schedules(-1)", (), "SW030"),
    ("SELECT * FROM scrinalia.tick(NULL, NULL)", (), "SW030"),
    ("SELECT * FROM scrinalia.tick(ARRAY['ocr'], ARRAY[]::timestamptz[])", (), "SW030"),
    ("SELECT * FROM scrinalia.tick(ARRAY['ocr'], ARRAY[now() - interval '1 s'])", (), "SW030"),
    ("SELECT * FROM scrinalia.tick(ARRAY['ocr'], ARRAY[NULL]::timestamptz[])", (), "SW030"),
    ("SELECT * FROM scrinalia.tick(ARRAY[NULL], ARRAY[now() + interval '1 h'])", (), "SW030"),
    (
        "SELECT * FROM scrinalia.tick(ARRAY['ocr','ocr'], ARRAY[now() + interval '1 h', now() + interval '2 h'])",
        (),
        "SW030",
    ),
    ("SELECT scrinalia.retry_delay(0, 0)", (), "SW002"),
    ("SELECT scrinalia.retry_delay(1, 0.5)", (), "SW002"),
    ("SELECT scrinalia.retry_delay(NULL, 0)", (), "SW002"),
    ("SELECT scrinalia.prune_runs('1 hour')", (), "SW002"),
    ("SELECT scrinalia.prune_runs('30 days', 0)", (), "SW002"),
    ("SELECT scrinalia.prune_runs(NULL)", (), "SW002"),
    ("SELECT scrinalia.add_units('nope', ARRAY['a'])", (), "SW001"),
    ("SELECT scrinalia.register_worker('Bad Name')", (), "SW002"),
    ("SELECT scrinalia.register_worker(NULL)", (), "SW002"),
]


@pytest.mark.parametrize("sql,params,expected", WRONG_TYPES, ids=[f"{i}" for i in range(len(WRONG_TYPES))])
def test_wrong_types_and_values_are_refused(world, fingerprint, sql, params, expected):
    before = fingerprint(world)
    assert_class(refusal(world, sql, params), expected, sql)
    assert fingerprint(world) == before


def test_unknown_workers_are_refused(world, fingerprint):
    before = fingerprint(world)
    for sql, expected in [
        ("SELECT scrinalia.enqueue('nope')", "SW001"),
        ("SELECT scrinalia.put_schedule('nope', '0 3 * * *')", "SW001"),
        ("SELECT scrinalia.put_settings('nope', '{}')", "SW001"),
        ("SELECT scrinalia.add_units('nope', ARRAY['u1'])", "SW001"),
        ("SELECT scrinalia.delete_schedule('nope')", "SW001"),
        ("SELECT scrinalia.set_schedule_enabled('nope', false)", "SW001"),
    ]:
        e = refusal(world, sql)
        assert_class(e, expected, sql)
        assert "'nope'" in e.diag.message_primary
    # reads of an unknown worker answer nothing rather than something wrong
    assert world.execute("SELECT * FROM scrinalia.get_schedule('nope')").fetchall() == []
    assert world.execute("SELECT * FROM scrinalia.claim_next('r1', '1 minute', ARRAY['nope'])").fetchall() == []
    assert fingerprint(world) == before


def test_mark_units_processed_refuses_an_unknown_worker(world):
    assert_class(refusal(world, "SELECT scrinalia.mark_units_processed('nope', ARRAY['u1'])"), "SW001")


_RUNNER_OK = re.compile(r"[A-Za-z0-9_.:@/-]{1,200}")


def test_hostile_worker_names_are_refused_and_quoted(world, fingerprint):
    before = fingerprint(world)
    for s in hostile_strings():
        for sql, expected in [
            ("SELECT scrinalia.enqueue(%s)", "SW001"),
            ("SELECT scrinalia.put_schedule(%s, '0 3 * * *')", "SW001"),
            ("SELECT scrinalia.put_settings(%s, '{}')", "SW001"),
            ("SELECT scrinalia.add_units(%s, ARRAY['u'])", "SW001"),
            ("SELECT scrinalia.delete_schedule(%s)", "SW001"),
            ("SELECT scrinalia.register_worker(%s)", "SW002"),
        ]:
            e = refusal(world, sql, (s,))
            assert_class(e, expected, f"{sql} {s!r}")
        assert world.execute("SELECT * FROM scrinalia.get_schedule(%s)", (s,)).fetchall() == []
    assert fingerprint(world) == before
    assert world.execute("SELECT to_regclass('scrinalia.archive_worker_runs')").fetchone()[0] is not None


def test_hostile_runner_ids_are_refused(world, fingerprint):
    world.execute("SELECT scrinalia.enqueue('ocr')")  # something claimable, so a bad id would matter
    before = fingerprint(world)
    bad = [s for s in hostile_strings() + ["r" * 201, "runner 1", "r\u00e9"] if not _RUNNER_OK.fullmatch(s)]
    assert len(bad) > 40
    for s in bad:
        e = refusal(world, "SELECT * FROM scrinalia.claim_next(%s)", (s,))
        assert_class(e, "SW022", f"runner id {s!r}")
    assert fingerprint(world) == before
    assert claim(world, "ok-runner_1:host@x/y") is not None  # the allowed alphabet still works


def test_nul_is_refused_by_the_driver_before_the_database(db_dsn, fingerprint):
    with psycopg.connect(db_dsn) as conn:  # a transaction, to see whether the server saw anything
        make_worker(conn)
        conn.commit()
        before = fingerprint(conn)
        conn.commit()
        for sql in (
            "SELECT scrinalia.enqueue(%s)",
            "SELECT * FROM scrinalia.claim_next(%s)",
            "SELECT scrinalia.validate_cron(%s)",
        ):
            with pytest.raises(psycopg.DataError) as ei:
                conn.execute(sql, ("ocr\x00; DROP TABLE x",))
            assert ei.value.sqlstate is None  # raised by psycopg while adapting, not by PostgreSQL
            assert "NUL" in str(ei.value)
            # a server-side error would have aborted the transaction; it is still usable
            assert conn.info.transaction_status != psycopg.pq.TransactionStatus.INERROR
            assert conn.execute("SELECT 1").fetchone() == (1,)
        conn.rollback()
        assert fingerprint(conn) == before


# --- the same through the CLI ---------------------------------------------------

CLI_CASES = [
    (["schedule", "put", "ocr", "--cron", "0 0 * * MON#2"], "field 5"),
    (["schedule", "put", "ocr", "--cron", "@daily"], "macro"),
    (["schedule", "put", "ocr", "--cron", "0 0 0 * * *"], "5 fields"),
    (["schedule", "put", "ocr", "--cron", "0 \u0662 * * *"], "cron"),
    (["schedule", "put", "ocr", "--cron", "0 2 * * *", "--timezone", "Mars/Base"], "zone"),
    (["schedule", "put", "ocr", "--cron", "0 2 * * *", "--request", "{nope"], "request"),
    (["schedule", "put", "ocr", "--cron", "0 2 * * *", "--request", '{"engine": 1}'], "SW002"),
    (["schedule", "put", "nope'; DROP TABLE x; --", "--cron", "0 2 * * *"], "SW001"),
    (["schedule", "get", "nope"], "nope"),
    (["schedule", "delete", "nope"], "SW001"),
    (["enqueue", "ocr", "--request", '{"options": {"dpi": "x"}}'], "SW002"),
    (["enqueue", "ocr", "--request", "[1]"], "request"),
    (["enqueue", "ocr\x01"], "SW001"),
    (["settings", "put", "ocr", "--settings", '{"preset": "slow"}'], "SW002"),
    (["cancel", "abc"], "RUN_ID"),
    (["cancel", "999999"], "SW011"),
    (["prune", "--older-than", "1 hour"], "SW002"),
    (["prune", "--older-than", "soon"], ""),
    (["frobnicate"], ""),
]


def test_cli_refuses_bad_input_in_one_line(world, db_dsn, fingerprint):
    before = fingerprint(world)
    for argv, fragment in CLI_CASES:
        p = subprocess.run(
            [sys.executable, "-m", "scrinalia_workers", *argv, *_dsn_arg(argv, db_dsn)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        where = f"{argv}: rc={p.returncode} stderr={p.stderr!r}"
        assert p.returncode != 0, where
        assert "Traceback" not in p.stderr, where
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("scrinalia-workers: error:"), where
        assert fragment.lower() in lines[0].lower(), where
    assert fingerprint(world) == before


def _dsn_arg(argv: list[str], dsn: str) -> list[str]:
    return [] if argv == ["frobnicate"] or argv[:2] == ["cancel", "abc"] else ["--dsn", dsn]
