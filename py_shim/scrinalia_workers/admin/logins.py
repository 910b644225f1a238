"""One login per job, for a stack that starts from a superuser (compose's postgres image):
`scrinalia-workers groups logins`, run once per cluster and database as that superuser.

It creates the groups when missing, then a login for each job in its one group: the
owner (who migrates: CREATE and CONNECT on this database, no group), the scheduler
(scrinalia_scheduler), the runner (scrinalia_runner), the exporter (scrinalia_monitor)
and, when SCRINALIA_WEB_PASSWORD is set, the web view (scrinalia_reader). Each login's
name and password come from the environment (SCRINALIA_<JOB>_LOGIN,
SCRINALIA_<JOB>_PASSWORD), never from the command line. A login that exists gets its
group, nothing else: its password is replaced only when asked (--reset-password), and
one this step would never create (SUPERUSER, CREATEROLE, REPLICATION or BYPASSRLS,
NOLOGIN, or in another scrinalia group) is refused before anything changes. After it the
superuser is needed no more: every process logs in as its own job.
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
from scrinalia_workers.gateway.checks import GROUPS, MEMBERSHIPS
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


def _refusal(conn: psycopg.Connection, job: Job, login: str) -> str | None:
    """Why an existing `login` is not one this step may take over for `job` (None: it may,
    or it does not exist). It would keep what it has: a login of a job has its group and
    nothing more."""
    row = conn.execute(sql.LOGIN_STANDING, (list(GROUPS), login)).fetchone()
    if row is None:
        return None
    can_login, *attributes, member_of = row
    held = [name for name, has in zip(("SUPERUSER", "CREATEROLE", "REPLICATION", "BYPASSRLS"), attributes) if has]
    if held:
        what = f"has {' and '.join(held)}"
    elif not can_login:
        what = "is NOLOGIN (a group's, not a login's)"
    else:
        allowed = {job.group, *(g for m, g in MEMBERSHIPS if m == job.group)} if job.group else set()
        others = sorted(set(member_of) - allowed)
        if not others:
            return None
        what = f"is in {', '.join(others)}"
    return (
        f"refusing SCRINALIA_{job.key}_LOGIN {login}: an existing role that {what}, which this step would "
        "never give it and cannot take away; name a login of its own (or fix that role first); nothing was changed"
    )


@dataclass(frozen=True)
class Done:
    login: str
    created: bool
    password_set: bool


def create(conn: psycopg.Connection, env: dict[str, str] | None = None, reset_password: bool = False) -> list[Done]:
    """Creates the logins, or gives an existing one its group (and, with `reset_password`,
    the password again), in one transaction after the groups; refuses, changing nothing,
    a login it would not create itself."""
    wanted = _wanted(dict(os.environ if env is None else env))
    for job, login, _ in wanted:
        why = _refusal(conn, job, login)
        if why:
            raise ConfigError(why)
    groups.create(conn)
    done = []
    with conn.transaction():
        conn.execute(sql.PINNED_SEARCH_PATH.replace("SET ", "SET LOCAL ", 1))
        for job, login, password in wanted:
            exists = conn.execute(sql.ROLE_EXISTS, (login,)).fetchone() is not None
            if not exists or reset_password:
                verb = "ALTER ROLE {} PASSWORD {}" if exists else "CREATE ROLE {} LOGIN PASSWORD {}"
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
            done.append(Done(login, created=not exists, password_set=not exists or reset_password))
    return done


def create_at(dsn: str, reset_password: bool = False) -> list[Done]:
    with connection.connect(dsn, application_name="scrinalia-workers groups logins") as conn:
        conn.execute(sql.PINNED_SEARCH_PATH)
        return create(conn, reset_password=reset_password)
