"""`scrinalia-workers groups logins`: a login per job in its one group, passwords from the
environment (never argv), hashed before they reach the server, refused when missing."""

from __future__ import annotations

import os

import psycopg
import pytest

from helpers import ENV_DB_VARS, cli

PASSWORDS = {f"SCRINALIA_{j}_PASSWORD": f"pw-{j.lower()}-S3cret" for j in ("OWNER", "SCHEDULER", "RUNNER", "EXPORTER")}
LOGINS = {
    "SCRINALIA_OWNER_LOGIN": "t_owner",
    "SCRINALIA_SCHEDULER_LOGIN": "t_sched",
    "SCRINALIA_RUNNER_LOGIN": "t_run",
    "SCRINALIA_EXPORTER_LOGIN": "t_exporter",
}


def _env(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if k not in ENV_DB_VARS and not k.startswith("SCRINALIA_")}
    return {**base, **PASSWORDS, **LOGINS, **extra}


def test_each_job_gets_its_login_in_its_group_with_a_hashed_password(empty_db_dsn, admin):
    r = cli("groups", "logins", dsn=empty_db_dsn, env=_env())
    assert r.code == 0, r.err
    assert all(p not in r.out + r.err for p in PASSWORDS.values())
    rows = {
        name: (login, sup, createrole, pw)
        for name, login, sup, createrole, pw in admin.execute(
            "SELECT rolname, rolcanlogin, rolsuper, rolcreaterole, rolpassword FROM pg_authid WHERE rolname = ANY(%s)",
            (list(LOGINS.values()),),
        )
    }
    assert set(rows) == set(LOGINS.values())
    for login, sup, createrole, pw in rows.values():
        assert login and not sup and not createrole
        assert pw.startswith("SCRAM-SHA-256$") and "S3cret" not in pw
    member = "SELECT pg_has_role(%s, %s, 'MEMBER')"
    assert admin.execute(member, ("t_sched", "scrinalia_scheduler")).fetchone()[0]
    assert admin.execute(member, ("t_run", "scrinalia_runner")).fetchone()[0]
    assert admin.execute(member, ("t_exporter", "scrinalia_monitor")).fetchone()[0]
    assert not admin.execute(member, ("t_run", "scrinalia_scheduler")).fetchone()[0]
    with psycopg.connect(empty_db_dsn) as conn:
        assert conn.execute("SELECT has_database_privilege('t_owner', current_database(), 'CREATE')").fetchone()[0]
    again = cli("groups", "logins", dsn=empty_db_dsn, env=_env())  # idempotent: passwords set again
    assert again.code == 0, again.err


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        ({"SCRINALIA_RUNNER_PASSWORD": ""}, "SCRINALIA_RUNNER_PASSWORD is not set"),
        ({"SCRINALIA_RUNNER_LOGIN": "Robert'); DROP ROLE x;--"}, "is not a login name"),
        ({"SCRINALIA_RUNNER_LOGIN": "scrinalia_runner"}, "a group's name"),
        ({"SCRINALIA_RUNNER_LOGIN": "t_sched"}, "the same login"),
    ],
)
def test_bad_settings_are_one_line_and_change_nothing(empty_db_dsn, admin, extra, fragment):
    before = admin.execute("SELECT count(*) FROM pg_roles").fetchone()[0]
    r = cli("groups", "logins", dsn=empty_db_dsn, env=_env(**extra))
    assert r.code != 0 and fragment in r.err and "Traceback" not in r.err, r.err
    assert admin.execute("SELECT count(*) FROM pg_roles").fetchone()[0] == before


def _auth_state(admin) -> tuple:
    roles = admin.execute(
        "SELECT rolname, rolsuper, rolcreaterole, rolreplication, rolcanlogin, rolpassword FROM pg_authid ORDER BY 1"
    ).fetchall()
    members = admin.execute(
        "SELECT roleid::regrole::text, member::regrole::text FROM pg_auth_members ORDER BY 1, 2"
    ).fetchall()
    acls = admin.execute("SELECT datname, datacl::text FROM pg_database ORDER BY 1").fetchall()
    return roles, members, acls


@pytest.fixture
def own_logins(admin, empty_db_dsn):
    """Login names of this test's own, dropped (with their grants) afterwards."""
    names = {job: f"t5_{job.lower()}" for job in ("OWNER", "SCHEDULER", "RUNNER", "EXPORTER")}
    drop = list(names.values())

    def _drop():
        with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
            for n in drop:
                if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (n,)).fetchone():
                    conn.execute(f'DROP OWNED BY "{n}"')
                    conn.execute(f'DROP ROLE "{n}"')

    _drop()
    yield {f"SCRINALIA_{job}_LOGIN": n for job, n in names.items()}
    _drop()


@pytest.mark.parametrize(
    ("job", "make", "fragment"),
    [
        ("SCHEDULER", "CREATE ROLE {} LOGIN SUPERUSER PASSWORD 'old'", "has SUPERUSER"),
        ("RUNNER", "CREATE ROLE {} LOGIN CREATEROLE PASSWORD 'old'", "has CREATEROLE"),
        ("EXPORTER", "CREATE ROLE {} LOGIN REPLICATION PASSWORD 'old'", "has REPLICATION"),
        ("RUNNER", "CREATE ROLE {} LOGIN PASSWORD 'old' IN ROLE scrinalia_scheduler", "is in scrinalia_scheduler"),
        ("OWNER", "CREATE ROLE {} LOGIN PASSWORD 'old' IN ROLE scrinalia_operator", "is in scrinalia_operator"),
        ("SCHEDULER", "CREATE ROLE {} NOLOGIN", "is NOLOGIN"),
    ],
)
def test_a_login_it_would_not_create_is_refused_and_nothing_changes(
    empty_db_dsn, admin, own_logins, job, make, fragment
):
    assert cli("groups", "create", dsn=empty_db_dsn).code == 0  # the groups, for IN ROLE
    login = own_logins[f"SCRINALIA_{job}_LOGIN"]
    admin.execute(make.format(login))
    before = _auth_state(admin)
    r = cli("groups", "logins", dsn=empty_db_dsn, env=_env(**own_logins))
    assert r.code == 2, (r.code, r.out, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and login in lines[0] and fragment in lines[0] and "nothing was changed" in lines[0], r.err
    assert _auth_state(admin) == before


def _password(admin, login: str) -> str:
    return admin.execute("SELECT rolpassword FROM pg_authid WHERE rolname = %s", (login,)).fetchone()[0]


def test_an_existing_login_keeps_its_password_unless_asked(empty_db_dsn, admin, own_logins):
    login = own_logins["SCRINALIA_RUNNER_LOGIN"]
    admin.execute(f"CREATE ROLE {login} LOGIN PASSWORD 'the-operators-own'")
    kept = _password(admin, login)
    r = cli("groups", "logins", dsn=empty_db_dsn, env=_env(**own_logins))
    assert r.code == 0, r.err
    assert f"{login} (existing, password kept)" in r.out and "t5_scheduler (created)" in r.out, r.out
    assert _password(admin, login) == kept  # it still logs in with its own password
    assert admin.execute("SELECT pg_has_role(%s, 'scrinalia_runner', 'MEMBER')", (login,)).fetchone()[0]
    r = cli("groups", "logins", "--reset-password", dsn=empty_db_dsn, env=_env(**own_logins))
    assert r.code == 0, r.err
    assert f"{login} (existing, password reset)" in r.out, r.out
    assert _password(admin, login) != kept
    dsn = psycopg.conninfo.make_conninfo(empty_db_dsn, user=login, password=PASSWORDS["SCRINALIA_RUNNER_PASSWORD"])
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT current_user").fetchone()[0] == login
