"""A scrinalia group that already exists is checked before anything trusts it.

Planted as a LOGIN, a SUPERUSER, with CREATEROLE, CREATEDB, REPLICATION or BYPASSRLS,
administered by a foreign login, or made a member of another role, it would turn every
login granted the group into more than the group. `groups create`, `groups sql | psql`,
`migrate --create-groups`, migrate and the daemons' start-up check each refuse, naming
the role and what is wrong, and change nothing. One cluster for the module: roles are
cluster-wide, and each case drops what it planted.
"""

from __future__ import annotations

import subprocess
import sys

import psycopg
import pytest

from helpers import cli
from scrinalia_workers.admin import groups
from scrinalia_workers.admin import migrate as m
from scrinalia_workers.testkit.cluster import LocalCluster, find_bin_dir

pytestmark = pytest.mark.slow  # a PostgreSQL of its own for the module

PLANTS = {
    "LOGIN": "CREATE ROLE scrinalia_reader LOGIN",
    "SUPERUSER": "CREATE ROLE scrinalia_reader NOLOGIN SUPERUSER",
    "CREATEROLE": "CREATE ROLE scrinalia_runner NOLOGIN CREATEROLE",
    "CREATEDB": "CREATE ROLE scrinalia_scheduler NOLOGIN CREATEDB",
    "REPLICATION": "CREATE ROLE scrinalia_operator NOLOGIN REPLICATION",
    "BYPASSRLS": "CREATE ROLE scrinalia_reader NOLOGIN BYPASSRLS",
    "a member with ADMIN OPTION: intruder": (
        "CREATE ROLE intruder LOGIN; CREATE ROLE scrinalia_runner NOLOGIN; "
        "GRANT scrinalia_runner TO intruder WITH ADMIN OPTION"
    ),
    "a member of pg_read_all_data": "CREATE ROLE scrinalia_reader NOLOGIN; GRANT pg_read_all_data TO scrinalia_reader",
}


@pytest.fixture(scope="module")
def cluster():
    if find_bin_dir() is None:
        pytest.skip("needs PostgreSQL server binaries")
    c = LocalCluster(find_bin_dir()).start()
    yield c
    c.stop()


@pytest.fixture
def su(cluster):
    with psycopg.connect(cluster.dsn("postgres"), autocommit=True) as conn:
        yield conn
        for g in (*groups.GROUPS, "intruder"):
            conn.execute(f"DROP ROLE IF EXISTS {g}")


def _groups(su) -> dict[str, tuple]:
    return {
        r[0]: tuple(r[1:])
        for r in su.execute(
            "SELECT rolname, rolcanlogin, rolsuper, rolcreaterole, rolcreatedb, rolreplication, rolbypassrls"
            " FROM pg_roles WHERE rolname LIKE 'scrinalia\\_%' ORDER BY 1"
        )
    }


@pytest.mark.parametrize("problem", list(PLANTS))
def test_groups_create_refuses_a_planted_group_and_changes_nothing(cluster, su, problem):
    su.execute(PLANTS[problem])
    before = _groups(su)
    r = cli("groups", "create", dsn=cluster.dsn("postgres"))
    assert r.code != 0, r
    line = r.err.strip()
    assert len(line.splitlines()) == 1 and "Traceback" not in r.err, r.err
    assert problem in line and "refusing to trust the scrinalia groups" in line, line
    assert _groups(su) == before  # nothing created, nothing altered


@pytest.mark.parametrize("problem", ["SUPERUSER", "a member of pg_read_all_data"])
def test_the_printed_sql_refuses_the_same_when_a_dba_runs_it(cluster, su, problem):
    su.execute(PLANTS[problem])
    before = _groups(su)
    with pytest.raises(psycopg.errors.RaiseException, match="refusing to trust role"):
        su.execute(groups.groups_sql())
    assert _groups(su) == before


def test_migrate_with_create_groups_refuses_a_planted_group(cluster, su):
    su.execute(PLANTS["LOGIN"])
    su.execute("CREATE DATABASE planted_a")
    try:
        with pytest.raises(m.ConfigError, match="role scrinalia_reader has LOGIN"):
            m.migrate(cluster.dsn("planted_a"), create_groups=True)
        with psycopg.connect(cluster.dsn("planted_a")) as conn:
            assert conn.execute("SELECT to_regnamespace('scrinalia')").fetchone()[0] is None
    finally:
        su.execute("DROP DATABASE IF EXISTS planted_a WITH (FORCE)")


def test_a_group_altered_after_the_install_stops_migrate_and_the_daemons(cluster, su):
    su.execute("CREATE DATABASE altered_b")
    dsn = cluster.dsn("altered_b")
    try:
        m.migrate(dsn, create_groups=True)
        su.execute("ALTER ROLE scrinalia_runner LOGIN")
        with pytest.raises(m.ConfigError, match="role scrinalia_runner has LOGIN"):
            m.migrate(dsn)
        for module in ("scrinalia_workers.scheduler", "scrinalia_workers.runner"):
            argv = [sys.executable, "-m", module, "--dsn", dsn]
            if module.endswith("runner"):
                argv += ["--handlers", "scrinalia_workers.demo.handlers"]
            p = subprocess.run(argv, capture_output=True, text=True, timeout=60)
            assert p.returncode == 2, (module, p.stderr)
            assert "role scrinalia_runner has LOGIN" in p.stderr and "Traceback" not in p.stderr, p.stderr
        su.execute("ALTER ROLE scrinalia_runner NOLOGIN")
        assert m.migrate(dsn) == []  # sound again: migrate goes on
    finally:
        su.execute("DROP DATABASE IF EXISTS altered_b WITH (FORCE)")


def test_sound_groups_pass_every_check(cluster, su):
    assert groups.create_at(cluster.dsn("postgres")) != []
    assert groups.create_at(cluster.dsn("postgres")) == []  # idempotent
    su.execute(groups.groups_sql())  # the printed SQL accepts what it created


def test_a_cluster_without_the_monitoring_group_migrates_and_is_told(cluster, su, caplog):
    """scrinalia_monitor came after the first four groups: a cluster an earlier release
    set up lacks it; migrate still runs, grants nothing to it, and says what to run."""
    su.execute("CREATE DATABASE older_c")
    dsn = cluster.dsn("older_c")
    try:
        m.migrate(dsn, create_groups=True)
        with psycopg.connect(dsn, autocommit=True) as conn:  # as if an earlier release set the cluster up
            conn.execute("DROP OWNED BY scrinalia_monitor")
        su.execute("DROP ROLE scrinalia_monitor")
        with caplog.at_level("WARNING", logger="scrinalia_workers.migrate"):
            assert m.migrate(dsn) == []
        assert "scrinalia_monitor" in caplog.text and "groups create" in caplog.text
        assert groups.create_at(cluster.dsn("postgres")) == ["scrinalia_monitor"]
        m.migrate(dsn)
        with psycopg.connect(dsn) as conn:
            granted = conn.execute(
                "SELECT has_function_privilege('scrinalia_monitor', 'scrinalia.worker_metrics()', 'EXECUTE')"
            ).fetchone()[0]
        assert granted
    finally:
        su.execute("DROP DATABASE IF EXISTS older_c WITH (FORCE)")
