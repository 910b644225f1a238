"""The test harness: a real PostgreSQL, never a mock.

SCRINALIA_TEST_DSN names an existing server (a superuser DSN, its database is used
only to create and drop the test databases); otherwise a throwaway cluster is
started from the installed server binaries and removed at the end. Each test that
asks for `db` gets its own database, cloned from a migrated template.
"""

from __future__ import annotations

import itertools
import os

import psycopg
import pytest

from scrinalia_workers.admin.groups import create_at as create_groups
from scrinalia_workers.admin.migrate import migrate
from scrinalia_workers.testkit.cluster import start_cluster
from scrinalia_workers.testkit.procs import Procs

# The daemons a test starts import the tests' own handler modules (demo_handlers.py).
TESTS = os.path.dirname(os.path.abspath(__file__))
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (TESTS, os.environ.get("PYTHONPATH")) if p)

_counter = itertools.count()


@pytest.fixture(scope="session")
def pg_cluster():
    if os.environ.get("SCRINALIA_TEST_DSN"):
        yield None
        return
    cluster = start_cluster()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def admin_dsn(pg_cluster) -> str:
    return os.environ.get("SCRINALIA_TEST_DSN") or pg_cluster.dsn("postgres")


def dsn_for(admin: str, dbname: str) -> str:
    return psycopg.conninfo.make_conninfo(admin, dbname=dbname)


class _Admin:
    """A superuser connection that reconnects after a server restart (some tests
    restart the cluster under load)."""

    def __init__(self, dsn: str):
        self.dsn = dsn
        self.conn = psycopg.connect(dsn, autocommit=True)

    def execute(self, *args, **kwargs):
        if self.conn.closed or self.conn.broken:
            self.conn = psycopg.connect(self.dsn, autocommit=True)
        try:
            return self.conn.execute(*args, **kwargs)
        except psycopg.OperationalError:
            self.conn = psycopg.connect(self.dsn, autocommit=True)
            return self.conn.execute(*args, **kwargs)

    def close(self):
        self.conn.close()


@pytest.fixture(scope="session")
def admin(admin_dsn):
    a = _Admin(admin_dsn)
    yield a
    a.close()


@pytest.fixture(scope="session")
def template_db(admin, admin_dsn) -> str:
    name = f"sw_template_{os.getpid()}"
    admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
    admin.execute(f'CREATE DATABASE "{name}"')
    migrate(dsn_for(admin_dsn, name), create_groups=True)  # the cluster-wide groups too
    yield name
    admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def empty_db_dsn(admin, admin_dsn):
    """A new, empty database (for the migration tests); the cluster's groups exist."""
    create_groups(admin_dsn)
    name = f"sw_empty_{os.getpid()}_{next(_counter)}"
    admin.execute(f'CREATE DATABASE "{name}"')
    yield dsn_for(admin_dsn, name)
    admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def db_dsn(admin, admin_dsn, template_db):
    """A migrated database of this test's own, cloned from the template."""
    name = f"sw_test_{os.getpid()}_{next(_counter)}"
    admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"')
    yield dsn_for(admin_dsn, name)
    admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def db(db_dsn):
    """A superuser connection (autocommit) to the test's own migrated database."""
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        yield conn


@pytest.fixture
def own_cluster():
    """A cluster of the test's own, for tests that restart PostgreSQL under load."""
    from scrinalia_workers.testkit.cluster import LocalCluster, find_bin_dir

    if find_bin_dir() is None:
        pytest.skip("needs PostgreSQL server binaries (the embedded server cannot restart)")
    cluster = LocalCluster(find_bin_dir()).start()
    try:
        yield cluster
    finally:
        cluster.stop()


GROUPS = ("reader", "operator", "runner", "scheduler", "monitor")


@pytest.fixture(scope="session")
def role_logins(admin, template_db) -> dict[str, str]:
    """A LOGIN role per group (sw_login_<group>, member of scrinalia_<group> only)."""
    logins = {}
    for g in GROUPS + ("nobody",):
        login = f"sw_login_{g}"
        exists = admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (login,)).fetchone()
        if not exists:
            admin.execute(f'CREATE ROLE "{login}" LOGIN')
        if g != "nobody":
            admin.execute(f'GRANT "scrinalia_{g}" TO "{login}"')
        logins[g] = login
    return logins


@pytest.fixture
def connect_as(db_dsn, role_logins, template_db):
    """connect_as('runner') -> an autocommit connection logged in as that group's login."""
    opened = []

    def _connect(group: str) -> psycopg.Connection:
        conn = psycopg.connect(psycopg.conninfo.make_conninfo(db_dsn, user=role_logins[group]), autocommit=True)
        opened.append(conn)
        return conn

    yield _connect
    for c in opened:
        c.close()


@pytest.fixture
def procs():
    """Start daemons through this (procs.scheduler(dsn, ...), procs.runner(dsn, ...)):
    whatever still runs when the test ends is stopped (scrinalia_workers.testkit.procs)."""
    started = Procs()
    yield started
    started.end()
