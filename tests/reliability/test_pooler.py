"""The daemons and the clients through a real PgBouncer (issue 13).

Each test starts its own PgBouncer (the Debian package; 1.18 on bookworm) in front
of a cluster of this module's own, in the pool mode under test:

- session mode: the scheduler takes the lock, ticks and enqueues a due schedule;
- transaction mode: the scheduler must refuse to run (one line, exit 2, no tick),
  since its session advisory lock cannot be kept there; the runners and the
  operator's clients must work.

PgBouncer before 1.21 does not track protocol-level prepared statements in
transaction mode, and psycopg 3 prepares a statement after 5 executions on a
connection (prepare_threshold): a long-lived connection's Bind then reaches a
backend that has no such statement, or another client's statement of that name.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psycopg
import pytest
from psycopg.rows import dict_row

from infra import (
    PgBouncer,
    pgbouncer_version,
    require_pgbouncer,
    require_server_binaries,
)
from scrinalia_workers.admin.migrate import migrate
from scrinalia_workers.testkit.cluster import LocalCluster
from scrinalia_workers.testkit.waiting import wait_for

pytestmark = pytest.mark.slow

TEMPLATE = "sw_pool_template"
OPERATOR = "sw_pool_operator"
WORKERS = 30

HANDLERS = textwrap.dedent("""
    import time

    def work(run):
        time.sleep(0.01)

    HANDLERS = {"*": work}
""")


@pytest.fixture(scope="module")
def cluster():
    bin_dir = require_server_binaries()
    require_pgbouncer()
    c = LocalCluster(bin_dir).start()
    try:
        with psycopg.connect(c.dsn(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{TEMPLATE}"')
            migrate(c.dsn(TEMPLATE), create_groups=True)
            conn.execute(f'CREATE ROLE "{OPERATOR}" LOGIN IN ROLE scrinalia_operator')
        yield c
    finally:
        c.stop()


@pytest.fixture
def dbname(cluster, request):
    name = f"sw_pool_{request.node.name.replace('[', '_').replace(']', '')}"[:60]
    with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{TEMPLATE}"')
    with psycopg.connect(cluster.dsn(name), autocommit=True) as conn:
        conn.execute(
            "INSERT INTO scrinalia.archive_workers (worker_name) "
            "SELECT 'w' || lpad(g::text, 2, '0') FROM generate_series(1, %s) g",
            (WORKERS,),
        )
    yield name
    with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def bouncers(cluster):
    started: list[PgBouncer] = []

    def _start(pool_mode: str, **kwargs) -> PgBouncer:
        b = PgBouncer(cluster, pool_mode, users=("postgres", OPERATOR), **kwargs).start()
        started.append(b)
        return b

    yield _start
    for b in started:
        b.stop()


@pytest.fixture
def handlers_module(tmp_path, monkeypatch):
    (tmp_path / "pool_handlers.py").write_text(HANDLERS)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    return "pool_handlers"


def _due_schedule(conn: psycopg.Connection, worker: str = "w01") -> None:
    """A `* * * * *` schedule whose period passed a minute ago: the first tick enqueues it."""
    conn.execute(
        "INSERT INTO scrinalia.archive_worker_schedules (worker_name, cron, timezone, next_run_at) "
        "VALUES (%s, '* * * * *', 'UTC', date_trunc('minute', now()) - interval '1 minute')",
        (worker,),
    )


def _state(conn: psycopg.Connection) -> dict:
    return (
        conn.cursor(row_factory=dict_row)
        .execute(
            "SELECT s.ticks, s.last_tick_by, (SELECT count(*) FROM scrinalia.archive_worker_runs) AS runs "
            "FROM scrinalia.scheduler_state s"
        )
        .fetchone()
    )


def _exit_code(proc, timeout: float) -> int | None:
    try:
        return proc.popen.wait(timeout)
    except subprocess.TimeoutExpired:
        return None


def test_pgbouncer_is_the_one_ci_installs():
    """The findings below are about this version (Debian bookworm ships 1.18)."""
    version = pgbouncer_version()
    assert version >= (1, 18), version


def test_scheduler_works_through_a_session_pool(cluster, dbname, bouncers, procs):
    bouncer = bouncers("session")
    direct = psycopg.connect(cluster.dsn(dbname), autocommit=True)
    _due_schedule(direct)
    scheds = [
        procs.scheduler(bouncer.dsn(dbname), "--standby-retry", "0.5", "--max-sleep", "0.5", "--name", f"pooled{i}")
        for i in (1, 2)
    ]
    try:
        wait_for(lambda: _state(direct)["ticks"] > 0, timeout=15, what="a tick through the pool")
        run = wait_for(
            lambda: direct.execute(
                "SELECT run_id, scheduled_for FROM scrinalia.archive_worker_runs "
                "WHERE worker_name = 'w01' AND trigger = 'SCHEDULE'"
            ).fetchone(),
            timeout=10,
            what="the due period enqueued",
        )
        assert run is not None
        # exactly one of the two holds the lock; the other stands by through the same pool
        wait_for(
            lambda: sum(s.count("lock acquired") for s in scheds) == 1 and sum(s.count("standby") for s in scheds) == 1,
            timeout=10,
            what="one holder, one standby",
        )
        holder = direct.execute(
            "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
            "WHERE l.locktype = 'advisory' AND l.granted "
            "AND ((l.classid::bigint << 32) | l.objid::bigint) = scrinalia.scheduler_lock_key()"
        ).fetchone()
        assert holder == ("scrinalia-scheduler lock",)
        time.sleep(1.5)  # a few more 0.5 s ticks: still healthy, still one enqueue
        assert all(s.popen.poll() is None for s in scheds)
        assert not any(s.count("tick error") for s in scheds)
        assert direct.execute("SELECT count(*) FROM scrinalia.archive_worker_runs").fetchone()[0] == 1
        codes = procs.stop_all(scheds)
    finally:
        direct.close()
    assert codes == [0, 0]


def test_standby_takes_over_through_a_session_pool(cluster, dbname, bouncers, procs):
    """The holder is SIGKILLed: PgBouncer resets the server connection it held
    (server_reset_query = DISCARD ALL, the default, runs pg_advisory_unlock_all) and
    the standby takes the lock at its next retry."""
    bouncer = bouncers("session")
    direct = psycopg.connect(cluster.dsn(dbname), autocommit=True)
    _due_schedule(direct)
    scheds = [
        procs.scheduler(bouncer.dsn(dbname), "--standby-retry", "0.5", "--max-sleep", "0.5", "--name", f"pooled{i}")
        for i in (1, 2)
    ]
    try:
        wait_for(
            lambda: sum(s.count("lock acquired") for s in scheds) == 1 and sum(s.count("standby") for s in scheds) == 1,
            timeout=15,
            what="one holder, one standby",
        )
        holder, standby = sorted(scheds, key=lambda s: s.count("lock acquired"), reverse=True)
        killed = time.monotonic()
        holder.kill(signal.SIGKILL)
        standby.wait_event("lock acquired", timeout=10)
        takeover = time.monotonic() - killed
        _due_schedule(direct, "w02")
        wait_for(
            lambda: (
                direct.execute(
                    "SELECT count(*) FROM scrinalia.archive_worker_runs WHERE worker_name = 'w02'"
                ).fetchone()[0]
                == 1
            ),
            timeout=10,
            what="the new holder enqueuing a due period",
        )
        codes = procs.stop_all(s for s in scheds if s.running())
    finally:
        direct.close()
    assert codes == [0]
    print(f"\nsession-pool takeover after SIGKILL: {takeover:.2f} s")
    assert takeover < 3.0


def test_scheduler_refuses_a_transaction_pool(cluster, dbname, bouncers, procs):
    bouncer = bouncers("transaction")
    direct = psycopg.connect(cluster.dsn(dbname), autocommit=True)
    _due_schedule(direct)
    sched = procs.scheduler(bouncer.dsn(dbname), "--standby-retry", "0.5", "--max-sleep", "0.5")
    try:
        code = _exit_code(sched, timeout=10)
        state = _state(direct)
    finally:
        direct.close()
    assert code == 2, f"still running after 10 s through a transaction pool:\n{''.join(sched.raw[-5:])}"
    lines = [line for line in sched.raw if line.strip()]
    assert "Traceback" not in "".join(lines)
    assert "transaction" in lines[-1] and "pool" in lines[-1], lines[-1]
    assert state == {"ticks": 0, "last_tick_by": None, "runs": 0}


def test_scheduler_names_a_pooler_that_refuses_its_startup_options(cluster, dbname, bouncers, procs):
    """A session pool, but PgBouncer left at its default ignore_startup_parameters."""
    bouncer = bouncers("session", ignore_startup_parameters="extra_float_digits")
    direct = psycopg.connect(cluster.dsn(dbname), autocommit=True)
    _due_schedule(direct)
    sched = procs.scheduler(bouncer.dsn(dbname), "--standby-retry", "0.5", "--max-sleep", "0.5")
    try:
        code = _exit_code(sched, timeout=10)
    finally:
        direct.close()
    assert "unsupported startup parameter: options" in bouncer.log()
    assert code == 2, f"still running after 10 s:\n{''.join(sched.raw[-3:])}"
    assert "options" in sched.raw[-1] and "Traceback" not in "".join(sched.raw)


def _cli(dsn: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "scrinalia_workers.cli", *args, "--dsn", dsn], capture_output=True, text=True, timeout=30
    )


def test_operator_clients_through_a_transaction_pool(cluster, dbname, bouncers):
    """The CLI (one short connection per command), psql and a long-lived psycopg
    connection with prepare_threshold=None, as an operator login, while a runner's
    traffic shares the pool's backends."""
    bouncer = bouncers("transaction", pool_size=3)
    dsn = bouncer.dsn(dbname, user=OPERATOR)
    direct = psycopg.connect(cluster.dsn(dbname), autocommit=True)
    try:
        r = _cli(dsn, "enqueue", "w01", "--json")
        assert r.returncode == 0, r.stderr
        psql = cluster.bin_dir / "psql"
        r = subprocess.run(
            [
                str(psql),
                "-X",
                "-q",
                "-v",
                "ON_ERROR_STOP=1",
                "-d",
                dsn,
                "-At",
                "-c",
                "SELECT run_id FROM scrinalia.enqueue('w02')",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert r.returncode == 0 and r.stdout.strip().isdigit(), r.stderr
        with psycopg.connect(dsn, autocommit=True, prepare_threshold=None) as op:
            for i in range(3, WORKERS + 1):  # far more than 5 executions of one statement
                op.execute("SELECT scrinalia.enqueue(%s)", (f"w{i:02d}",))
        r = _cli(dsn, "status", "--json")
        assert r.returncode == 0, r.stderr
        assert (
            direct.execute("SELECT count(*) FROM scrinalia.archive_worker_runs WHERE status = 'QUEUED'").fetchone()[0]
            == WORKERS
        )
        # a busy slot through the pool is still the distinguishable SW010 (CLI exit 3)
        r = _cli(dsn, "enqueue", "w01")
        assert r.returncode == 3, (r.returncode, r.stderr)
    finally:
        direct.close()


@pytest.mark.parametrize(
    "pool_mode",
    [
        "session",
        "transaction",
    ],
)
def test_runners_through_a_pool(cluster, dbname, bouncers, handlers_module, pool_mode, procs):
    """Three runners claim 2 x 30 runs through the pool (each connection executes
    claim_next and finish far more than 5 times)."""
    bouncer = bouncers(pool_mode, pool_size=4)
    direct = psycopg.connect(cluster.dsn(dbname), autocommit=True)
    runners = [
        procs.runner(bouncer.dsn(dbname), handlers_module, "--lease", "3", "--runner-id", f"r{i}") for i in range(3)
    ]
    rounds = 2

    def drained(status_sql: str, expected: int):
        def check():
            dead = [r for r in runners if r.popen.poll() is not None]
            assert not dead, "a runner died:\n" + "".join(line for r in dead for line in r.raw[-8:])
            return (
                direct.execute(f"SELECT count(*) FROM scrinalia.archive_worker_runs WHERE {status_sql}").fetchone()[0]
                == expected
            )

        return check

    try:
        for _ in range(rounds):
            wait_for(drained("status IN ('QUEUED', 'RUNNING')", 0), timeout=20, what="the runners to drain the queue")
            direct.execute("SELECT scrinalia.enqueue(worker_name) FROM scrinalia.archive_workers")
        wait_for(drained("status = 'SUCCEEDED'", rounds * WORKERS), timeout=20, what="every run SUCCEEDED")
        codes = procs.stop_all(runners)
    finally:
        direct.close()
    assert codes == [0, 0, 0], "".join(line for r in runners for line in r.raw[-6:])
    assert sum(r.count("finished") for r in runners) == rounds * WORKERS
