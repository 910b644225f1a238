"""The daemons started before PostgreSQL: they wait with backoff, say so once (then at a
bounded rate), and start when the server comes up; a refusal no wait can mend (no
such database) still exits 2 at once, one line."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import psycopg
import pytest
from psycopg.types.json import Jsonb

from scrinalia_workers.admin.migrate import migrate
from scrinalia_workers.testkit.cluster import LocalCluster, find_bin_dir, free_port

pytestmark = pytest.mark.slow


@pytest.fixture
def later_cluster():
    """A cluster whose port is chosen now and whose server the test starts later."""
    if find_bin_dir() is None:
        pytest.skip("needs PostgreSQL server binaries")
    cluster = LocalCluster(find_bin_dir(), port=free_port())
    try:
        yield cluster
    finally:
        cluster.stop()


def test_daemons_started_before_the_database_wait_for_it(later_cluster, procs):
    dsn = later_cluster.dsn("postgres")
    # migrated, then down: when it comes back up it is at the head at once, so that the
    # daemons' start-up check meets a migrated database, not one being migrated
    later_cluster.start()
    migrate(dsn, create_groups=True)
    later_cluster.pg_ctl("stop", "-m", "fast", "-w")  # a clean stop: the data stays
    sched = procs.scheduler(dsn, "--max-sleep", "0.2", "--standby-retry", "0.2")
    runner = procs.runner(dsn, "scrinalia_workers.demo.load_handlers", "--runner-id", "early")
    for p in (sched, runner):
        ev = p.wait_event("waiting for the database", timeout=20)
        assert "Connection refused" in ev["reason"] and ev["attempts"] == 1
    later_cluster.start()
    sched.wait_event("lock acquired", timeout=30)
    with psycopg.connect(dsn, autocommit=True) as db:
        db.execute("SELECT scrinalia.register_worker('w', '{}', '{}', %s)", (Jsonb({"seconds": {"type": "number"}}),))
        run_id = db.execute("SELECT run_id FROM scrinalia.enqueue('w', %s)", (Jsonb({}),)).fetchone()[0]
    runner.wait_event("finished", run_id=run_id, status="SUCCEEDED", timeout=30)
    # said once for a short wait, not at every attempt
    assert sched.count("waiting for the database") == 1 and runner.count("waiting for the database") == 1
    assert sched.count("config error") == 0 and runner.count("config error") == 0
    assert sched.stop() == 0 and runner.stop() == 0


def test_a_database_that_does_not_exist_exits_2_at_once(admin_dsn):
    dsn = psycopg.conninfo.make_conninfo(admin_dsn, dbname="sw_no_such_database")
    for argv in (
        [sys.executable, "-m", "scrinalia_workers.scheduler", "--dsn", dsn],
        [
            sys.executable,
            "-m",
            "scrinalia_workers.runner",
            "--dsn",
            dsn,
            "--handlers",
            "scrinalia_workers.demo.handlers",
        ],
    ):
        r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert r.returncode == 2, r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and 'database "sw_no_such_database" does not exist' in lines[0], r.stderr


def test_a_server_that_never_answers_ends_the_wait_at_its_limit():
    """A listener that accepts and never answers (a hung server, a black-holed proxy):
    each daemon's --wait-for-database 2 ends within the limit and a second, its connect
    attempts included, one line and exit 2."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        silent = f"host=127.0.0.1 port={s.getsockname()[1]} dbname=x user=x"
        refusing = f"host=127.0.0.1 port={free_port()} dbname=x user=x"
        for daemon, extra in (("scheduler", []), ("runner", ["--handlers", "scrinalia_workers.demo.handlers"])):
            argv = [sys.executable, "-m", f"scrinalia_workers.{daemon}", *extra]
            # the interpreter's start and exit, measured against a refusal, are not the wait's
            started = time.monotonic()
            r = subprocess.run([*argv, "--dsn", refusing, "--wait-for-database", "0"], capture_output=True, timeout=60)
            bare = time.monotonic() - started
            assert r.returncode == 2, r.stderr
            started = time.monotonic()
            r = subprocess.run(
                [*argv, "--dsn", silent, "--wait-for-database", "2"], capture_output=True, text=True, timeout=60
            )
            took = time.monotonic() - started - bare
            assert took <= 2 + 1, (daemon, took, bare)
            assert r.returncode == 2 and "timeout" in r.stderr.strip().splitlines()[-1], r.stderr
