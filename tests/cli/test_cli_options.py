"""The CLI as an operator (or an attacker) first meets it: global options anywhere, no
password echoed, no traceback for any flag value, ranges refused by the parser, and
no demo or throwaway-cluster code behind it."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import psycopg
import pytest

from helpers import assert_one_line_error, cli, make_worker
from scrinalia_workers.testkit.cluster import free_port

# --- global options before or after the command ----------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["--dsn", "{dsn}", "--json", "runs"],
        ["--json", "runs", "--dsn", "{dsn}"],
        ["runs", "--dsn", "{dsn}", "--json"],
        ["--dsn={dsn}", "runs", "--json"],
        ["--json", "--dsn", "{dsn}", "schedule", "get", "ocr"],
        ["schedule", "--json", "get", "ocr", "--dsn", "{dsn}"],
    ],
)
def test_global_options_before_or_after_the_command(db, db_dsn, argv):
    make_worker(db, "ocr")
    db.execute("SELECT scrinalia.put_schedule('ocr', '0 2 * * *', 'UTC')")
    r = cli(*[a.format(dsn=db_dsn) for a in argv])
    assert r.code == 0, r.err
    json.loads(r.out)  # --json was honoured wherever it stood


def test_a_dsn_after_the_command_wins_over_one_before(db_dsn):
    bad = f"host=127.0.0.1 port={free_port()} dbname=x connect_timeout=3"
    assert cli("--dsn", bad, "runs", "--dsn", db_dsn).code == 0
    assert_one_line_error(cli("--dsn", db_dsn, "runs", "--dsn", bad), 1, "cannot connect")


# --- no password on the terminal -------------------------------------------------------

SECRET = "s3cret-Pw"


@pytest.mark.parametrize(
    "dsn",
    [
        f"postgresql://u:{SECRET}@127.0.0.1:{{port}}/x?connect_timeout=3",  # refused connection
        f"postgresql//u:{SECRET}@127.0.0.1/x",  # malformed: libpq quotes it
        f"postgresql://u:{SECRET}@127.0.0.1:{{port}}/x?bogus=1",  # an unknown parameter
        f"host=127.0.0.1 port={{port}} user=u password={SECRET} dbname=x connect_timeout=3",
        f"host=127.0.0.1 password='{SECRET} x' port=oops",  # invalid port
    ],
)
@pytest.mark.parametrize("where", ["--dsn", "DATABASE_URL"])
def test_no_error_echoes_a_password(dsn, where):
    dsn = dsn.format(port=free_port())
    for argv in (["status"], ["demo-seed"], ["worker", "list"], ["migrate"]):
        r = cli(*argv, "--dsn", dsn) if where == "--dsn" else cli(*argv, env={"DATABASE_URL": dsn})
        assert r.code in (1, 2), (argv, r)
        assert "Traceback" not in r.err and len(r.err.strip().splitlines()) == 1, r.err
        assert SECRET not in r.err + r.out, (argv, r.err)


def test_the_redaction_is_not_a_blanket(db_dsn):
    # an error without a password keeps its useful text
    r = cli("runs", "--dsn", f"host=127.0.0.1 port={free_port()} dbname=x connect_timeout=3")
    assert "127.0.0.1" in r.err and "***" not in r.err


# --- no traceback for any flag value; ranges refused by the parser ----------------------


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["cancel", "--", "-1"], "-1 is out of range 1..9223372036854775807"),
        (["cancel", "0"], "0 is out of range"),
        (["cancel", "9223372036854775808"], "out of range"),
        (["cancel", "1e3"], "'1e3' is not a run id"),
        (["runs", "--limit", "-5"], "--limit: -5 is out of range 1..100000"),
        (["runs", "--limit", "0"], "--limit: 0 is out of range"),
        (["runs", "--limit", "99999999999999999999999"], "out of range"),
        (["prune", "--older-than", "30 days", "--batch", "-1"], "--batch: -1 is out of range"),
        (["migrate", "--rollback", "--count", "-2"], "--count: -2 is out of range"),
        (["demo", "--duration", "-5"], "--duration: -5 is out of range"),
        (["demo", "--duration", "nan"], "--duration: nan is out of range"),
        (["demo", "--duration", "inf"], "--duration: inf is out of range"),
        (["demo", "--duration", "soon"], "'soon' is not a number of seconds"),
        (["enqueue", "ocr", "--request", '"x"'], "--request must be a JSON object"),
        (["settings", "put", "ocr", "--settings", "{"], "--settings is not valid JSON"),
        (["worker", "register"], "FILE"),
        (["worker", "frob"], "invalid choice"),
        (["--dsn"], "--dsn: expected one argument"),
    ],
)
def test_bad_values_are_refused_by_the_parser(argv, fragment):
    # no database is configured: the parser answers before anything connects
    assert_one_line_error(cli(*argv), 2, fragment)


def test_odd_values_reaching_the_database_are_one_line(db_dsn, db):
    make_worker(db, "ocr")
    for argv in (
        ["enqueue", "ocr", "--request", '{"options": {"dpi": "\\u0000"}}'],
        ["enqueue", "x" * 5000],
        ["prune", "--older-than", "1000000000 years"],
        ["schedule", "put", "ocr", "--cron", "* * * * *", "--timezone", "../../etc/passwd"],
        ["runs", "ocr\x01"],
    ):
        r = cli(*argv, "--dsn", db_dsn)
        assert r.code in (1, 2) and "Traceback" not in r.err and len(r.err.strip().splitlines()) == 1, (argv, r)
        assert "unexpected" not in r.err, r.err


# --- the hints an operator is given are runnable by the operator -------------------------


@pytest.mark.parametrize(
    "argv, sqlstate",
    [
        (["enqueue", "nope"], "SW001"),
        (["enqueue", "ocr"], "SW010"),  # the test queued one first
        (["prune", "--older-than", "1 hour"], "SW002"),
    ],
)
def test_hints_are_runnable_by_the_operator_who_gets_them(db_dsn, db, role_logins, argv, sqlstate):
    make_worker(db, "ocr")
    db.execute("SELECT scrinalia.enqueue('ocr', '{}', 'CLI')")
    operator = psycopg.conninfo.make_conninfo(db_dsn, user=role_logins["operator"])
    r = cli(*argv, "--dsn", operator)
    assert f"[{sqlstate}]" in r.err and "hint: " in r.err, r.err
    hint = r.err.split("hint: ", 1)[1]
    with psycopg.connect(operator, autocommit=True) as conn:
        for query in re.findall(r"SELECT [^()]*?(?= lists|\)|$)", hint):
            conn.execute(query)  # raises if the operator may not run it
        for rel in re.findall(r"scrinalia\.([a-z_]+)", hint):
            assert conn.execute("SELECT has_table_privilege(%s, 'SELECT')", (f"scrinalia.{rel}",)).fetchone()[0], (
                f"the hint names scrinalia.{rel}, which an operator cannot read: {hint}"
            )


# --- the CLI does not carry the demo ---------------------------------------------------------


def test_the_cli_does_not_import_the_demo_or_the_throwaway_cluster():
    code = (
        "import sys, scrinalia_workers.cli.app as c; c.build_parser().format_help();"
        "import scrinalia_workers.demo.handlers, scrinalia_workers.demo.setup;"
        "print(sorted(m for m in sys.modules if m.startswith('scrinalia_workers')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = eval(out)
    assert "scrinalia_workers.cli" in loaded
    assert "scrinalia_workers.demo.narrate" not in loaded and "scrinalia_workers.testkit.cluster" not in loaded, loaded
