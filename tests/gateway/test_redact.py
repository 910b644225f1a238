"""No password is ever printed, whatever the shape of the DSN that carries it: each shape
is given to the real commands, and their error line is searched for the password."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from scrinalia_workers.gateway.redact import cut_echoes, redact

SECRET_WORDS = ("secret", "Secret4321", "ssW0rd", "S3cr3tPass", "p%zzw0rd", "zzw0rd")

# (how a DSN can be written, the password inside it)
SHAPES = [
    ("postgresql://u:my secret pw@/db", "my secret pw"),
    ('postgresql://u:pa"ssW0rd@[::1/db', 'pa"ssW0rd'),
    ("postgresql://u:p%zzw0rd@localhost/db", "p%zzw0rd"),
    ("postgresql://u:S3cr3tPass@[::1/db", "S3cr3tPass"),
    ("password=my Secret4321 host=/tmp", "my Secret4321"),
    ("password='my Secret4321' host=/nonexistent dbname=x port=1", "my Secret4321"),
    ("password=Secret4321 host=/nonexistent port=1 user=u", "Secret4321"),
    ("host=/nonexistent password='unterminated Secret4321", "unterminated Secret4321"),
    ("postgresql://u:S3cr3tPass@/db?sslmode=bogus", "S3cr3tPass"),
]

COMMANDS = [
    [sys.executable, "-m", "scrinalia_workers", "status"],
    [sys.executable, "-m", "scrinalia_workers.scheduler", "--wait-for-database", "0"],
    [
        sys.executable,
        "-m",
        "scrinalia_workers.runner",
        "--handlers",
        "scrinalia_workers.demo.handlers",
        "--wait-for-database",
        "0",
    ],
]


def _leaks(text: str, password: str) -> list[str]:
    pieces = {password, *password.split()} | {w for w in SECRET_WORDS if w in password}
    return [p for p in pieces if len(p) >= 3 and p in text]


@pytest.mark.parametrize(("dsn", "password"), SHAPES)
def test_no_command_prints_a_password_from_a_dsn_of_any_shape(dsn, password):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG") and k != "DATABASE_URL"}
    for argv in COMMANDS:
        r = subprocess.run([*argv, "--dsn", dsn], capture_output=True, text=True, env=env, timeout=60)
        out = r.stdout + r.stderr
        assert r.returncode == 2 or r.returncode == 1, (argv, r.returncode, out)
        assert "Traceback" not in out
        assert not _leaks(out, password), (argv, out)


@pytest.mark.parametrize("where", ["DATABASE_URL", "PGPASSWORD"])
def test_a_password_from_the_environment_is_not_printed(where):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG") and k != "DATABASE_URL"}
    if where == "DATABASE_URL":
        env["DATABASE_URL"] = "postgresql://u:my secret pw@/db"
        password = "my secret pw"
    else:
        env.update(PGPASSWORD="S3cr3tPass", PGHOST="/nonexistent", PGPORT="1")
        password = "S3cr3tPass"
    for argv in COMMANDS:
        r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
        assert r.returncode in (1, 2), (argv, r.stdout, r.stderr)
        assert not _leaks(r.stdout + r.stderr, password), (argv, r.stderr)


def test_a_passfile_password_is_replaced_wherever_it_appears(tmp_path, monkeypatch):
    passfile = tmp_path / "pgpass"
    passfile.write_text("# comment\nlocalhost:5432:*:u:Pa\\:ssFromFile\n")
    monkeypatch.setenv("PGPASSFILE", str(passfile))
    assert "Pa:ssFromFile" not in redact("error: auth failed with Pa:ssFromFile")


def test_libpq_words_survive_and_only_the_echoed_dsn_goes():
    dsn = "postgresql://u:my secret pw@/db"
    line = cut_echoes('unexpected spaces found in "my secret pw", use percent-encoded spaces (%20) instead', dsn)
    assert "secret" not in line and line.startswith("unexpected spaces found in")
    assert line.endswith("use percent-encoded spaces (%20) instead")


def test_a_well_formed_dsn_keeps_its_message_whole_but_the_password():
    dsn = "host=db.example user=u password=S3cr3tPass dbname=archive"
    line = redact("could not connect to db.example as u with S3cr3tPass", dsn)
    assert line == "could not connect to db.example as u with ***"
