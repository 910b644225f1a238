"""scrinalia-runner refuses what it cannot run with: one line, exit 2, never a traceback.

Flags, the handlers module, and the login's privileges, each against the real
process (python -m scrinalia_workers.runner) and a real database.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import psycopg
import pytest

from helpers import make_worker, raises_sqlstate, run_row

pytestmark = pytest.mark.slow  # each test starts the real process


def _run(*args: str, env: dict | None = None, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "scrinalia_workers.runner", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def _one_line_exit_2(r: subprocess.CompletedProcess, *fragments: str) -> str:
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    for f in fragments:
        assert f in lines[0], (f, lines[0])
    return lines[0]


def test_without_handlers_it_refuses_to_start(db_dsn):
    line = _one_line_exit_2(_run("--dsn", db_dsn), "--handlers", "required")
    assert line.startswith("scrinalia-runner: ")


@pytest.mark.parametrize(
    "flag,value,fragment",
    [
        ("--runner-id", "bad id", "invalid runner id"),
        ("--runner-id", "r\u00e9sum\u00e9", "ASCII"),
        ("--runner-id", "\u0440unner", "ASCII"),  # a Cyrillic lookalike
        ("--runner-id", "r" * 201, "1 to 200"),
        ("--runner-id", "", "invalid runner id"),
        ("--lease", "-5", "between 1 and 86400"),
        ("--lease", "0", "between 1 and 86400"),
        ("--lease", "1e12", "between 1 and 86400"),
        ("--lease", "nan", "between 1 and 86400"),
        ("--lease", "thirty", "between 1 and 86400"),
        ("--grace", "0", "between 0.1 and 3600"),
        ("--grace", "-1", "between 0.1 and 3600"),
        ("--grace", "inf", "between 0.1 and 3600"),
        ("--grace", "99999999", "between 0.1 and 3600"),
        ("--concurrency", "0", "--concurrency"),
        ("--concurrency", "65", "--concurrency"),
        ("--concurrency", "two", "--concurrency"),
        ("--no-such-flag", "x", "unrecognized"),
    ],
)
def test_bad_flag_values_are_one_line_exit_2(db_dsn, flag, value, fragment):
    _one_line_exit_2(_run("--dsn", db_dsn, "--handlers", "scrinalia_workers.demo.handlers", flag, value), fragment)


BAD_MODULES = {
    "h_not_dict": "HANDLERS = [print]\n",
    "h_not_callable": "HANDLERS = {'ocr': 42}\n",
    "h_async": "async def f(run):\n    pass\nHANDLERS = {'ocr': f}\n",
    "h_syntax": "def f(run:\n",
    "h_raises": "raise SystemExit('the module exits on import')\n",
    "h_bad_key": "HANDLERS = {1: print}\n",
}


@pytest.mark.parametrize("module", sorted(BAD_MODULES))
def test_unusable_handlers_modules_are_one_line_exit_2(db_dsn, tmp_path, module):
    (tmp_path / f"{module}.py").write_text(BAD_MODULES[module])
    _one_line_exit_2(_run("--dsn", db_dsn, "--handlers", module, env={"PYTHONPATH": str(tmp_path)}), module)


def test_a_module_name_that_is_not_one(db_dsn):
    _one_line_exit_2(_run("--dsn", db_dsn, "--handlers", "../etc/passwd"), "not a Python module name")


def test_unreachable_database_at_start_up(tmp_path):
    _one_line_exit_2(
        _run(
            "--dsn",
            f"host={tmp_path} port=1 dbname=x connect_timeout=2",
            "--handlers",
            "scrinalia_workers.demo.handlers",
            "--wait-for-database",
            "0",
        ),
        "cannot connect",
    )


@pytest.mark.parametrize("dsn", ["not a dsn", "dbname='unterminated", "postgresql://[::1"])
def test_a_malformed_dsn_is_one_line_exit_2(dsn):
    _one_line_exit_2(_run("--dsn", dsn, "--handlers", "scrinalia_workers.demo.handlers"), "connection string")


@pytest.mark.parametrize("group", ["reader", "operator", "scheduler", "nobody"])
def test_a_login_that_cannot_claim_is_told_which_group(db_dsn, role_logins, group):
    dsn = psycopg.conninfo.make_conninfo(db_dsn, user=role_logins[group])
    line = _one_line_exit_2(
        _run("--dsn", dsn, "--handlers", "scrinalia_workers.demo.handlers"),
        f"login {role_logins[group]}",
        "not in scrinalia_runner",
        "EXECUTE on scrinalia.claim_runs(",
        f"GRANT scrinalia_runner TO {role_logins[group]}",
    )
    if group == "nobody":
        assert "USAGE on schema scrinalia" in line


def test_a_runner_group_missing_a_grant_is_named(db, db_dsn, role_logins):
    db.execute("REVOKE EXECUTE ON FUNCTION scrinalia.heartbeat_runs(bigint[], uuid[]) FROM scrinalia_runner")
    dsn = psycopg.conninfo.make_conninfo(db_dsn, user=role_logins["runner"])
    _one_line_exit_2(
        _run("--dsn", dsn, "--handlers", "scrinalia_workers.demo.handlers"),
        "is in scrinalia_runner but lacks EXECUTE on scrinalia.heartbeat_runs(bigint[], uuid[])",
    )


def test_json_start_up_errors_are_one_json_line(db_dsn, role_logins):
    import json

    dsn = psycopg.conninfo.make_conninfo(db_dsn, user=role_logins["reader"])
    r = _run("--dsn", dsn, "--handlers", "scrinalia_workers.demo.handlers", "--json")
    line = _one_line_exit_2(r)
    event = json.loads(line)
    assert event["event"] == "config error" and "scrinalia_runner" in event["reason"]


def test_the_runner_login_claims(db, db_dsn, role_logins, procs):
    # the check lets the login it was written for through, and that login really works
    make_worker(db, "ok")
    run_id = db.execute("SELECT run_id FROM scrinalia.enqueue('ok')").fetchone()[0]
    dsn = psycopg.conninfo.make_conninfo(db_dsn, user=role_logins["runner"])
    p = procs.runner(dsn, "demo_handlers", "--runner-id", "ascii-1:host@x/y")
    p.wait_event("finished", run_id=run_id)
    assert p.stop() == 0
    assert run_row(db, run_id)["status"] == "SUCCEEDED"


def test_sql_and_the_parser_agree_on_runner_ids(db):
    from scrinalia_workers.runner.runner_id import RUNNER_ID

    samples = [
        "runner-1@gpu01",
        "a.b:c/d_e",
        "r" * 200,
        "r" * 201,
        "r\u00e9",
        "\u0440",
        "\uff21",
        "runner 1",
        "r\u00b2",
        "\u0663",
        "tab\there",
        "",
    ]
    for s in samples:
        allowed = RUNNER_ID.fullmatch(s) is not None
        if allowed:
            db.execute("SELECT scrinalia.check_runner(%s, '1 minute')", (s,))
        else:
            with raises_sqlstate("SW022", "invalid runner id"):
                db.execute("SELECT scrinalia.check_runner(%s, '1 minute')", (s,))
    assert RUNNER_ID.fullmatch("r\u00e9") is None and RUNNER_ID.fullmatch("runner-1@gpu01")


def test_default_runner_id_is_valid(monkeypatch):
    import socket

    from scrinalia_workers.runner.runner_id import RUNNER_ID, default_runner_id

    monkeypatch.setattr(socket, "gethostname", lambda: "h\u00f4te d'\u00e9t\u00e9" + "x" * 300)
    assert RUNNER_ID.fullmatch(default_runner_id())


def test_a_privilege_lost_while_running_is_one_line_exit_2(db, db_dsn, role_logins, procs):
    login = role_logins["runner"]
    db.execute('CREATE ROLE "sw_login_runner_tmp" LOGIN IN ROLE scrinalia_runner')
    try:
        dsn = psycopg.conninfo.make_conninfo(db_dsn, user="sw_login_runner_tmp")
        p = procs.runner(dsn, "demo_handlers")
        p.wait_event("runner started")
        db.execute('REVOKE scrinalia_runner FROM "sw_login_runner_tmp"')
        make_worker(db, "ok")
        db.execute("SELECT scrinalia.enqueue('ok')")  # wakes it: the claim is refused
        assert p.popen.wait(60) == 2
        errors = [e for e in p.events if e.get("event") == "config error"]
        assert len(errors) == 1 and "permission denied" in errors[0]["reason"]
        assert not any("Traceback" in line for line in p.raw)
    finally:
        db.execute('DROP ROLE "sw_login_runner_tmp"')
    assert login  # the shared login was left alone


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_start_up_exits_without_a_traceback(db_dsn, tmp_path, sig):
    (tmp_path / "slow_import.py").write_text(
        "import sys, time\nprint('importing', file=sys.stderr, flush=True)\ntime.sleep(30)\nHANDLERS = {}\n"
    )
    # (no procs: the whole of stderr is read here; the module's import ends by itself)
    p = subprocess.Popen(
        [sys.executable, "-m", "scrinalia_workers.runner", "--dsn", db_dsn, "--handlers", "slow_import"],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    assert p.stderr.readline().strip() == "importing"
    p.send_signal(sig)
    _, rest = p.communicate(timeout=60)
    assert p.returncode == 128 + sig and "Traceback" not in rest


def test_the_checked_signatures_are_the_schemas(db):
    # the start-up check skips what does not exist: a renamed or re-typed function
    # must fail here rather than go unchecked
    from scrinalia_workers.gateway.statements.runner import RUNNER_FUNCTIONS

    found = {
        r[0]
        for r in db.execute(
            "SELECT format('%s(%s)', p.proname, replace(oidvectortypes(p.proargtypes), 'scrinalia.', ''))"
            "  FROM pg_proc p WHERE p.pronamespace = 'scrinalia'::regnamespace"
        )
    }
    assert set(RUNNER_FUNCTIONS) <= found, set(RUNNER_FUNCTIONS) - found


def test_a_revoked_finish_is_named_with_its_signature(db, db_dsn, role_logins):
    db.execute(
        "REVOKE EXECUTE ON FUNCTION"
        " scrinalia.finish_runs(bigint[], uuid[], scrinalia.run_status[], text[], text[]) FROM scrinalia_runner"
    )
    dsn = psycopg.conninfo.make_conninfo(db_dsn, user=role_logins["runner"])
    _one_line_exit_2(
        _run("--dsn", dsn, "--handlers", "scrinalia_workers.demo.handlers"),
        "lacks EXECUTE on scrinalia.finish_runs(bigint[], uuid[], run_status[], text[], text[])",
    )


def test_an_unmigrated_database_is_one_line_exit_2(empty_db_dsn):
    _one_line_exit_2(
        _run("--dsn", empty_db_dsn, "--handlers", "scrinalia_workers.demo.handlers"), "scrinalia-workers migrate"
    )


def test_the_installed_console_script_refuses_the_same_way():
    from pathlib import Path

    script = Path(sys.executable).parent / "scrinalia-runner"
    if not script.exists():
        pytest.skip("scrinalia-runner is not installed beside this interpreter")
    r = subprocess.run([str(script), "--runner-id", "r\u00e9"], capture_output=True, text=True, timeout=30)
    _one_line_exit_2(r, "scrinalia-runner: ", "ASCII")


def test_sql_code_older_than_the_runner_is_one_line_exit_2(db, db_dsn):
    # a release may add functions without a migration: a runner deployed before the
    # migrate re-installed the code is told so, instead of failing on every claim
    db.execute("DROP FUNCTION scrinalia.release_runs(bigint[], uuid[])")
    _one_line_exit_2(
        _run("--dsn", db_dsn, "--handlers", "scrinalia_workers.demo.handlers"),
        "lacks scrinalia.release_runs(bigint[], uuid[])",
        "older than this scrinalia-workers",
        "scrinalia-workers migrate",
    )
