"""The wheel built from the checkout, installed in a fresh virtualenv outside it with no
SCRINALIA_ROOT, migrates a database: the package carries its SQL."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from scrinalia_workers import __version__
from scrinalia_workers.admin.migrate import head_ids

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 300) -> str:
    p = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, (argv, p.stdout[-2000:], p.stderr[-2000:])
    return p.stdout


def test_a_built_wheel_installed_anywhere_migrates(empty_db_dsn, tmp_path):
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(ROOT)], cwd=tmp_path)
    (wheel,) = dist.glob("scrinalia_workers-*.whl")
    assert wheel.name.startswith(f"scrinalia_workers-{__version__}-")
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path)
    _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)], cwd=tmp_path, timeout=600)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("SCRINALIA_ROOT", "PYTHONPATH") and not k.startswith("PG")}
    env["DATABASE_URL"] = empty_db_dsn
    found = _run(
        [str(venv / "bin" / "python"), "-c", "from scrinalia_workers import sqlfiles; print(sqlfiles.project_root())"],
        cwd=elsewhere,
        env=env,
    )
    assert str(venv) in found and str(ROOT) not in found, found
    assert _run([str(venv / "bin" / "scrinalia-workers"), "--version"], cwd=elsewhere, env=env).strip() == (
        f"scrinalia-workers {__version__}"
    )
    out = _run([str(venv / "bin" / "scrinalia-workers"), "migrate", "--create-groups"], cwd=elsewhere, env=env)
    assert f"applied {head_ids()[-1]}" in out, out
    with psycopg.connect(empty_db_dsn, autocommit=True) as c:
        assert c.execute("SELECT scrinalia.schema_head()").fetchone()[0] == head_ids()[-1]
        assert c.execute("SELECT scrinalia.installed_release()").fetchone()[0] == __version__
