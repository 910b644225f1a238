"""Files handed to `worker register` and `schedule import` cannot hang, exhaust or crash
them: YAML aliases are refused, the bytes actually read are capped (regular files, FIFOs,
devices, stdin alike), nesting is bounded, and text PostgreSQL cannot store is refused by
`--check` as register would refuse it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import psycopg
import pytest

from helpers import ENV_DB_VARS
from scrinalia_workers import inputs
from scrinalia_workers.admin import catalogue
from scrinalia_workers.cli.files import read_schedule_file

ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
    f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
    for i in range(8)
)
COMMANDS = {
    "register": ["worker", "register", "--check"],
    "import": ["schedule", "import", "--dry-run"],
}
# a hang guard, not a measurement: each of these ends in well under a second
GUARD = 60


def _run(args: list[str], stdin: bytes | None = None, dsn: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ENV_DB_VARS}
    argv = [sys.executable, "-m", "scrinalia_workers", *args] + (["--dsn", dsn] if dsn else [])
    return subprocess.run(argv, input=stdin, capture_output=True, env=env, timeout=GUARD)


def _one_error(r: subprocess.CompletedProcess, *fragments: str) -> str:
    err = r.stderr.decode()
    assert r.returncode != 0, (r.returncode, err)
    assert "Traceback" not in err and "please report" not in err, err
    assert len(err.strip().splitlines()) == 1, err
    for f in fragments:
        assert f in err, (f, err)
    return err


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_yaml_alias_bomb_is_refused_at_once(tmp_path, command, db_dsn):
    assert len(ALIAS_BOMB) < 700
    path = tmp_path / "bomb.yaml"
    path.write_text(ALIAS_BOMB)
    _one_error(_run([*COMMANDS[command], str(path)], dsn=db_dsn), "YAML aliases", "not accepted")


@pytest.mark.parametrize("command", list(COMMANDS))
def test_dev_zero_is_read_only_up_to_the_cap(command, db_dsn):
    _one_error(_run([*COMMANDS[command], "/dev/zero"], dsn=db_dsn), "/dev/zero", "larger than")


@pytest.mark.parametrize("command", list(COMMANDS))
def test_stdin_is_read_only_up_to_the_cap(command, db_dsn):
    big = b"[" + b" " * (inputs.MAX_JSON_BYTES + 10) + b"]"
    _one_error(_run([*COMMANDS[command], "-"], stdin=big, dsn=db_dsn), "<stdin>", "larger than")


def test_a_fifo_is_read_only_up_to_the_cap(tmp_path, db_dsn):
    fifo = tmp_path / "workers.json"
    os.mkfifo(fifo)
    stop = threading.Event()

    def write() -> None:
        try:
            with open(fifo, "wb") as f:
                while not stop.is_set():
                    f.write(b" " * 1024 * 1024)
        except BrokenPipeError:
            pass

    t = threading.Thread(target=write, daemon=True)
    t.start()
    try:
        _one_error(_run(["worker", "register", "--check", str(fifo)]), str(fifo), "larger than 10 MiB")
    finally:
        stop.set()
        t.join(GUARD)


def test_yaml_past_its_cap_is_sent_to_json(tmp_path, db_dsn):
    path = tmp_path / "big.yaml"
    path.write_text("- " + "x" * (inputs.MAX_YAML_BYTES + 1) + "\n")
    _one_error(_run(["schedule", "import", "--dry-run", str(path)], dsn=db_dsn), "write a file this large as JSON")


def test_a_yaml_file_at_its_cap_is_parsed(tmp_path, db_dsn):
    item = '- {worker_name: "w%06d", cron: "*/5 * * * *", timezone: "UTC", request: {options: {dpi: 300}}}\n'
    lines = inputs.MAX_YAML_BYTES // len(item % 0)
    path = tmp_path / "many.yaml"
    path.write_text("".join(item % i for i in range(lines)))
    assert path.stat().st_size <= inputs.MAX_YAML_BYTES
    _, doc = read_schedule_file(str(path))
    assert len(json.loads(doc)) == lines


@pytest.mark.parametrize("command", list(COMMANDS))
def test_nesting_is_bounded_without_a_traceback(tmp_path, command, db_dsn):
    path = tmp_path / "deep.json"
    path.write_text("[" * 200_000 + "]" * 200_000)
    _one_error(_run([*COMMANDS[command], str(path)], dsn=db_dsn), "nested deeper than")


@pytest.mark.parametrize(("text", "problem"), [("a\x00b", "NUL"), ("a\udc80b", "lone surrogate")])
def test_check_refuses_what_register_cannot_store(tmp_path, text, problem):
    path = tmp_path / "w.json"
    doc = {"name": "ocr", "description": text}
    path.write_text(json.dumps(doc))  # \u0000 and \udc80 escaped: valid JSON
    _one_error(_run(["worker", "register", "--check", str(path)]), "description", problem)


def test_schedule_import_refuses_what_it_cannot_store(tmp_path, db_dsn):
    path = tmp_path / "s.json"
    path.write_text(json.dumps([{"worker_name": "ocr", "cron": "* * * * *", "request": {"options": {"x": "\x00"}}}]))
    _one_error(_run(["schedule", "import", "--dry-run", str(path)], dsn=db_dsn), "NUL")


def test_check_with_a_database_runs_registers_own_checks_and_writes_nothing(tmp_path, db_dsn, role_logins):
    path = tmp_path / "w.json"
    path.write_text(json.dumps({"name": "checked-only", "description": "a worker"}))
    r = _run(["worker", "register", "--check", "--json", str(path)], dsn=db_dsn)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["checked"] == "database"
    with psycopg.connect(db_dsn) as conn:
        assert not conn.execute("SELECT 1 FROM scrinalia.archive_workers WHERE worker_name = 'checked-only'").fetchone()
    operator = psycopg.conninfo.make_conninfo(db_dsn, user=role_logins["operator"])
    refused = _run(["worker", "register", "--check", str(path)], dsn=operator)
    registered = _run(["worker", "register", str(path)], dsn=operator)
    assert refused.returncode == registered.returncode != 0
    assert "permission denied" in refused.stderr.decode() and "permission denied" in registered.stderr.decode()


def test_the_catalogue_parser_names_the_file_in_every_refusal():
    with pytest.raises(catalogue.CatalogueError, match="^f.yaml: YAML aliases"):
        catalogue.parse(ALIAS_BOMB, "f.yaml", yaml_syntax=True)
