"""The four cluster-wide NOLOGIN groups, and the one membership between them.

Roles belong to the cluster, not to a database, so creating them needs a privilege a
database owner usually lacks (CREATEROLE, and ADMIN OPTION on the groups for the
membership). It is a separate step, run once per cluster by a privileged login:
`scrinalia-workers groups create`, or `scrinalia-workers groups sql | psql`.
`migrate` then only grants to them (which the owner of the objects may do), and stops
before changing anything when they are missing.
"""

from __future__ import annotations

import psycopg

from scrinalia_workers.errors import MissingPrivilege
from scrinalia_workers.gateway import connection
from scrinalia_workers.gateway.checks import GROUPS, MEMBERSHIPS, refuse_unsound_groups
from scrinalia_workers.gateway.connection import one
from scrinalia_workers.gateway.statements import admin as sql
from scrinalia_workers.gateway.statements.checks import group_problems


def groups_sql() -> str:
    """The SQL of the step, idempotent, for a login with CREATEROLE (or a superuser)."""
    names = ", ".join(f"'{g}'" for g in GROUPS)
    pairs = ", ".join(f"'{m}>{g}'" for m, g in MEMBERSHIPS)
    problems = group_problems(f"ARRAY[{names}]::text[]", f"ARRAY[{pairs}]::text[]")
    # in a block: two of these at once (migrates of two databases) must both succeed
    grants = "\n".join(
        f"DO $$ BEGIN GRANT {g} TO {m}; EXCEPTION WHEN unique_violation THEN NULL; END $$;" for m, g in MEMBERSHIPS
    )
    return f"""\
-- scrinalia-workers: the cluster-wide groups, once per cluster (re-running is harmless).
-- Needs CREATEROLE (and, on PostgreSQL 16+, ADMIN OPTION on the groups, which the
-- login that creates them has) or a superuser. The grants are migrate's business.
{sql.PINNED_SEARCH_PATH};
DO $$
DECLARE grp text; bad record;
BEGIN
    -- a group that exists must be a group and nothing more: refuse, changing nothing
    FOR bad IN {problems.strip()} LOOP
        RAISE EXCEPTION 'refusing to trust role %: it has %', bad.role, bad.problem
            USING HINT = 'a scrinalia group must be NOLOGIN, without SUPERUSER, CREATEROLE, CREATEDB, '
                         'REPLICATION or BYPASSRLS, a member of no other role; inspect it, fix or drop it';
    END LOOP;
    FOREACH grp IN ARRAY ARRAY[{names}] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = grp) THEN
            BEGIN
                EXECUTE pg_catalog.format('CREATE ROLE %I NOLOGIN', grp);
            EXCEPTION WHEN duplicate_object OR unique_violation THEN
                NULL;  -- created meanwhile by a migrate of another database
            END;
        END IF;
    END LOOP;
END $$;
{grants}
"""


def missing(conn: psycopg.Connection) -> list[str]:
    """What of the step is not done: missing group names and 'member IN group' pairs."""
    gone = [r[0] for r in conn.execute(sql.MISSING_GROUPS, (list(GROUPS),))]
    for member, group in MEMBERSHIPS:
        if member in gone or group in gone:
            continue
        if not one(conn.execute(sql.IS_MEMBER, (member, group)))[0]:
            gone.append(f"{member} IN ROLE {group}")
    return gone


def missing_message(gone: list[str]) -> str:
    return (
        f"the cluster-wide groups are not set up (missing: {', '.join(gone)}): a login with "
        "CREATEROLE (or a superuser) runs once per cluster `scrinalia-workers groups create` "
        "(or `scrinalia-workers groups sql | psql`), or pass `migrate --create-groups`; "
        "nothing was changed"
    )


def _privilege_hint(conn: psycopg.Connection, e: psycopg.Error) -> str:
    msg = e.diag.message_primary or str(e)
    if "admin option" in f"{msg} {e.diag.message_detail or ''}".lower():  # PG 15 / PG 16+ wording
        return (
            f"{msg}: this login needs ADMIN OPTION on the groups to grant the membership "
            "(the login that created them has it; or run as a superuser)"
        )
    attrs = conn.execute(sql.MY_ROLE_ATTRIBUTES).fetchone()
    if attrs is not None and not (attrs[0] or attrs[1]):
        return f"{msg}: this login lacks CREATEROLE (run the step as a login that has it, or a superuser)"
    return msg


def create(conn: psycopg.Connection) -> list[str]:
    """Creates what is missing (in one transaction); returns what it did. Refuses, changing
    nothing, when a group that exists is not what it must be."""
    refuse_unsound_groups(conn)
    gone = missing(conn)
    if not gone:
        return []
    try:
        with conn.transaction():
            conn.execute(sql.PINNED_SEARCH_PATH.replace("SET ", "SET LOCAL ", 1))
            conn.execute(groups_sql())
    except psycopg.errors.InsufficientPrivilege as e:
        raise MissingPrivilege(f"cannot create the scrinalia groups: {_privilege_hint(conn, e)}") from None
    return gone


def create_at(dsn: str) -> list[str]:
    """`scrinalia-workers groups create`: connect, pin the path, create what is missing."""
    with connection.connect(dsn, application_name="scrinalia-workers groups") as conn:
        conn.execute(sql.PINNED_SEARCH_PATH)
        return create(conn)
