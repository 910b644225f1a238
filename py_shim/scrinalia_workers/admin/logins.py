"""One login per job, for a stack that starts from a superuser (compose's postgres image):
`scrinalia-workers groups logins`, run once per cluster and database as that superuser.

It creates the groups when missing, then a login for each job in its one group: the
owner (who migrates: CREATE and CONNECT on this database, no group), the scheduler
(scrinalia_scheduler), the runner (scrinalia_runner), the exporter (scrinalia_monitor)
and, when SCRINALIA_WEB_PASSWORD is set, the web view (scrinalia_reader). Each login's
name and password come from the environment (SCRINALIA_<JOB>_LOGIN,
SCRINALIA_<JOB>_PASSWORD), never from the command line; a login
that exists gets the password again and its group, nothing else. After it the superuser
is needed no more: every process logs in as its own job.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import psycopg
from psycopg import sql as q

from scrinalia_workers.admin import groups
from scrinalia_workers.errors import ConfigError
from scrinalia_workers.gateway import connection
from scrinalia_workers.gateway.statements import admin as sql


@dataclass(frozen=True)
class Job:
    key: str  # the environment's name for it: SCRINALIA_<KEY>_LOGIN / _PASSWORD
    default_login: str
    group: str | None  # None: the owner, who gets the database instead of a group
    optional: bool = False  # created only when its password is given


JOBS = (
    Job("OWNER", "scrinalia_owner", None),
    Job("SCHEDULER", "scrinalia_sched", "scrinalia_scheduler"),
    Job("RUNNER", "scrinalia_run", "scrinalia_runner"),
    Job("EXPORTER", "scrinalia_exporter", "scrinalia_monitor"),
    Job("WEB", "scrinalia_web", "scrinalia_reader", optional=True),
)
_LOGIN = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def _wanted(env: dict[str, str]) -> list[tuple[Job, str, str]]:
    found = []
    for job in JOBS:
        if job.optional and not env.get(f"SCRINALIA_{job.key}_PASSWORD"):
            continue
        login = env.get(f"SCRINALIA_{job.key}_LOGIN") or job.default_login
        if not _LOGIN.fullmatch(login) or login.startswith(("pg_", "scrinalia_reader", "scrinalia_operator")):
            raise ConfigError(f"SCRINALIA_{job.key}_LOGIN {login!r} is not a login name this step creates")
        if login in groups.GROUPS:
            raise ConfigError(f"SCRINALIA_{job.key}_LOGIN {login!r} is a group's name, not a login's")
        password = env.get(f"SCRINALIA_{job.key}_PASSWORD")
        if not password:
            raise ConfigError(f"SCRINALIA_{job.key}_PASSWORD is not set: every login needs a password")
        found.append((job, login, password))
    if len({login for _, login, _ in found}) != len(found):
        raise ConfigError("two jobs were given the same login: each job logs in as its own")
    return found


def create(conn: psycopg.Connection, env: dict[str, str] | None = None) -> list[str]:
    """Creates or refreshes the logins (in one transaction, after the groups); returns them."""
    wanted = _wanted(dict(os.environ if env is None else env))
    groups.create(conn)
    done = []
    with conn.transaction():
        conn.execute(sql.PINNED_SEARCH_PATH.replace("SET ", "SET LOCAL ", 1))
        for job, login, password in wanted:
            exists = conn.execute(sql.ROLE_EXISTS, (login,)).fetchone()
            verb = "ALTER ROLE {} LOGIN PASSWORD {}" if exists else "CREATE ROLE {} LOGIN PASSWORD {}"
            # hashed here (SCRAM, as psql's \password does): the server never sees, nor logs, the password
            hashed = conn.pgconn.encrypt_password(password.encode(), login.encode(), b"scram-sha-256").decode()
            conn.execute(q.SQL(verb).format(q.Identifier(login), q.Literal(hashed)))
            if job.group is None:
                conn.execute(
                    q.SQL("GRANT CONNECT, CREATE ON DATABASE {} TO {}").format(
                        q.Identifier(conn.info.dbname), q.Identifier(login)
                    )
                )
            else:
                conn.execute(q.SQL("GRANT {} TO {}").format(q.Identifier(job.group), q.Identifier(login)))
            done.append(login)
    return done


def create_at(dsn: str) -> list[str]:
    with connection.connect(dsn, application_name="scrinalia-workers groups logins") as conn:
        conn.execute(sql.PINNED_SEARCH_PATH)
        return create(conn)
