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
