"""status says what this install leaves open: CONNECT granted to PUBLIC (any login can
take the scheduler's lock key), and a lock holder that is not a scheduler."""

from __future__ import annotations

import psycopg

from helpers import cli

KEY = 7305764011424514049  # scrinalia.scheduler_lock_key(): public knowledge


def test_status_says_when_the_database_grants_connect_to_public(db, db_dsn):
    dbname = db.execute("SELECT current_database()").fetchone()[0]
    out = cli("status", dsn=db_dsn).out
    assert f"database {dbname} still grants CONNECT to PUBLIC" in out and "REVOKE CONNECT" in out
    db.execute(f'REVOKE CONNECT ON DATABASE "{dbname}" FROM PUBLIC')
    db.execute(
        f'GRANT CONNECT ON DATABASE "{dbname}" TO scrinalia_reader, scrinalia_operator,'
        " scrinalia_runner, scrinalia_scheduler"
    )
    assert "CONNECT to PUBLIC" not in cli("status", dsn=db_dsn).out
    # the schema's owner here is a superuser: nothing to grant for a takeover
    assert "pg_signal_backend" not in cli("status", dsn=db_dsn).out


def test_status_names_a_holder_that_is_not_a_scheduler(db, db_dsn, role_logins):
    dsn = psycopg.conninfo.make_conninfo(db_dsn, user=role_logins["nobody"])
    with psycopg.connect(dsn, autocommit=True, application_name="squatter") as squatter:
        assert squatter.execute("SELECT pg_try_advisory_lock(%s)", (KEY,)).fetchone()[0]
        pid = squatter.execute("SELECT pg_backend_pid()").fetchone()[0]
        out = cli("status", dsn=db_dsn).out
    line = next(x for x in out.splitlines() if x.startswith("scheduler: "))
    assert f"pid {pid}" in line and f"role {role_logins['nobody']}" in line and "NOT a scheduler" in line
    health = next(x for x in out.splitlines() if x.startswith("health: "))
    assert "NOT HEALTHY" in health and role_logins["nobody"] in health
