"""A daemon given a password in --dsn (readable by every local user in its command line)
says so once at start-up, without the password, and says how to pass it instead."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from helpers import ENV_DB_VARS
from scrinalia_workers.gateway.dsn_password import carries_password

# (a DSN that carries a password, the password); each fails to connect at once
WITH_PASSWORD = [
    ("postgresql://u:S3cr3tPass@/db?host=/nonexistent", "S3cr3tPass"),
    ("postgresql://u:p%25zzw0rd@/db?host=/nonexistent", "p%zzw0rd"),
    ("password='my Secret4321' host=/nonexistent dbname=x port=1", "my Secret4321"),
    ("host=/nonexistent password='unterminated Secret4321", "unterminated Secret4321"),
]
WITHOUT_PASSWORD = ["postgresql://u@/db?host=/nonexistent", "host=/nonexistent dbname=x user=u port=1"]

DAEMONS = {
    "scheduler": [sys.executable, "-m", "scrinalia_workers.scheduler"],
    "runner": [sys.executable, "-m", "scrinalia_workers.runner", "--handlers", "scrinalia_workers.demo.handlers"],
}


def _run(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ENV_DB_VARS}
    return subprocess.run(
        [*argv, "--wait-for-database", "0"], capture_output=True, text=True, env={**base, **(env or {})}, timeout=60
    )


@pytest.mark.parametrize("daemon", DAEMONS)
@pytest.mark.parametrize(("dsn", "password"), WITH_PASSWORD)
def test_a_password_in_dsn_is_warned_of_once_and_never_printed(daemon, dsn, password):
    r = _run([*DAEMONS[daemon], "--dsn", dsn])
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("password on the command line") == 1, r.stderr
    assert "PGPASSWORD" in r.stderr and "docs/operate.md" in r.stderr, r.stderr
    for part in (password, *password.split()):
        assert part not in r.stderr + r.stdout, (part, r.stderr)


@pytest.mark.parametrize("daemon", DAEMONS)
def test_no_warning_without_a_password_on_the_command_line(daemon):
    for dsn in WITHOUT_PASSWORD:
        r = _run([*DAEMONS[daemon], "--dsn", dsn])
        assert r.returncode == 2 and "password on the command line" not in r.stderr, r.stderr
    # the environment is not the command line: DATABASE_URL may carry it
    r = _run(DAEMONS[daemon], env={"DATABASE_URL": WITH_PASSWORD[0][0]})
    assert r.returncode == 2 and "password on the command line" not in r.stderr, r.stderr


def test_which_dsns_carry_a_password():
    assert all(carries_password(dsn) for dsn, _ in WITH_PASSWORD)
    assert not any(carries_password(dsn) for dsn in [*WITHOUT_PASSWORD, None, ""])
    assert carries_password("postgresql://u:pw@h/db") and not carries_password("postgresql://u@h:5432/db")
