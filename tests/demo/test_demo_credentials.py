"""The demo hands its DSN to its scheduler and runners through the environment: a password
in it is never on a command line, which every local user can read in /proc/PID/cmdline."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from scrinalia_workers.testkit.waiting import wait_for

SECRET = "S3cretDemoPw"


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        kids = (task / "children").read_text().split()
        found += [int(k) for k in kids]
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _started(pid: int) -> list[int] | None:
    """The children once there are 3 and each has exec'd its module: one between its fork
    and its exec still shows the demo's command line and, during the exec, no environment."""
    kids = _children(pid)
    return kids if len(kids) >= 3 and all("scrinalia_workers." in _cmdline(k) for k in kids) else None


@pytest.mark.slow
def test_the_demo_children_get_the_password_through_the_environment_only(empty_db_dsn):
    # trust authentication ignores the password, so the demo runs; the password still travels
    dsn = psycopg.conninfo.make_conninfo(empty_db_dsn, password=SECRET)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG") and k != "DATABASE_URL"}
    env["DATABASE_URL"] = dsn
    demo = subprocess.Popen(
        [sys.executable, "-m", "scrinalia_workers", "demo"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        children = wait_for(lambda: _started(demo.pid), 60, what="the demo's 3 children, each in its module")
        lines = [_cmdline(c) for c in children]
        assert any("scrinalia_workers.scheduler" in c for c in lines), lines
        assert any("scrinalia_workers.runner" in c for c in lines), lines
        for c in lines:
            assert SECRET not in c and "--dsn" not in c, c
        environs = [Path(f"/proc/{c}/environ").read_bytes() for c in children]
        assert all(f"DATABASE_URL={dsn}".encode() in e for e in environs)
    finally:
        os.killpg(demo.pid, signal.SIGINT)
        out, _ = demo.communicate(timeout=60)
    assert SECRET not in out
