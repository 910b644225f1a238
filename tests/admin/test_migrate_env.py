"""The libpq variables and service files reach every connection migrate opens, yoyo's
included (it was given a URI without the database, so it migrated the database
named like the user)."""

from __future__ import annotations

import psycopg
import pytest

from helpers import cli
from scrinalia_workers.admin import migrate as m

USER = "sw_env_admin"  # a database of the same name is the decoy the bug migrated


@pytest.fixture
def target(admin, admin_dsn):
    if not admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (USER,)).fetchone():
        admin.execute(f"CREATE ROLE {USER} LOGIN SUPERUSER")
    for db in (USER, "sw_env_target"):
        admin.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {db}")
    info = psycopg.conninfo.conninfo_to_dict(admin_dsn)
    yield info
    for db in (USER, "sw_env_target"):
        admin.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")


def _dsn(info: dict, db: str) -> str:
    return psycopg.conninfo.make_conninfo("", host=info["host"], port=info["port"], user="postgres", dbname=db)


def _assert_only_the_target_migrated(info: dict) -> None:
    assert m.applied_migrations(_dsn(info, "sw_env_target")) == m.head_ids()
    with psycopg.connect(_dsn(info, USER), autocommit=True) as decoy:
        assert decoy.execute("SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'scrinalia%'").fetchone()[0] == 0
        assert decoy.execute("SELECT count(*) FROM pg_class WHERE relname LIKE '%yoyo%'").fetchone()[0] == 0


def test_migrate_with_only_the_pg_variables(target):
    env = {
        "PGHOST": target["host"],
        "PGPORT": str(target["port"]),
        "PGUSER": USER,
        "PGDATABASE": "sw_env_target",
        "PGPASSWORD": "unused-by-trust",
    }
    r = cli("migrate", "--create-groups", env=env)
    assert r.code == 0, r.err
    _assert_only_the_target_migrated(target)
    again = cli("migrate", env=env)
    assert again.code == 0 and "already at the head" in again.out, again.err
    assert cli("status", env=env).code == 0


def test_migrate_with_a_service_file(target, tmp_path):
    services = tmp_path / "pg_service.conf"
    services.write_text(f"[archive]\nhost={target['host']}\nport={target['port']}\nuser={USER}\ndbname=sw_env_target\n")
    env = {"PGSERVICEFILE": str(services), "PGSERVICE": "archive"}
    r = cli("migrate", "--create-groups", env=env)
    assert r.code == 0, r.err
    _assert_only_the_target_migrated(target)
    assert cli("runs", env=env).code == 0


@pytest.mark.slow
def test_the_password_from_pgpassword_reaches_yoyos_connections(own_cluster):
    """With password authentication, yoyo's connections need the password too."""
    with psycopg.connect(own_cluster.dsn("postgres"), autocommit=True) as su:
        su.execute("CREATE ROLE sw_pw LOGIN SUPERUSER PASSWORD 's3cr:et w/ord'")
        su.execute("CREATE DATABASE sw_pw_db")
        hba = own_cluster.data / "pg_hba.conf"
        hba.write_text("host all sw_pw 127.0.0.1/32 scram-sha-256\n" + hba.read_text())
        su.execute("SELECT pg_reload_conf()")
    info = psycopg.conninfo.conninfo_to_dict(own_cluster.dsn("postgres"))
    env = {"PGHOST": info["host"], "PGPORT": str(info["port"]), "PGUSER": "sw_pw", "PGDATABASE": "sw_pw_db"}
    refused = cli("migrate", "--create-groups", env=env)  # the password is really required
    assert refused.code != 0 and "password" in refused.err, refused.err
    r = cli("migrate", "--create-groups", env={**env, "PGPASSWORD": "s3cr:et w/ord"})
    assert r.code == 0, r.err
    assert m.applied_migrations(own_cluster.dsn("sw_pw_db")) == m.head_ids()
