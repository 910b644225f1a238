"""The start-up check: refuse to run against a schema this code was not written for.

Uses only catalog queries and scrinalia.schema_head(), which every scrinalia group
may call: the scheduler's role has no more than USAGE on the schema.
"""

from __future__ import annotations

import psycopg
from psycopg.rows import dict_row

from scrinalia_workers import __version__
from scrinalia_workers.errors import (
    ConfigError,
    DatabaseUnavailable,
    MissingPrivilege,
    SchemaMismatch,
)
from scrinalia_workers.gateway import connection as db
from scrinalia_workers.gateway.backoff import StartupWait, is_permanent_connect_failure
from scrinalia_workers.gateway.connection import one
from scrinalia_workers.gateway.statements.checks import (
    GROUP_PROBLEMS,
    HAS_SCHEDULE_TRIGGER,
    PRIVILEGES,
    RUN_COLUMNS,
    SCHEMA_HEAD,
)
from scrinalia_workers.logs import EventLog, one_line
from scrinalia_workers.sqlfiles import head as expected_head
from scrinalia_workers.sqlfiles import migration_ids
from scrinalia_workers.text import printable

REQUIRED_COLUMNS = ("attempt", "retry_of", "not_before", "scheduled_for")

# The cluster-wide NOLOGIN groups the SQL grants to (admin/groups.py creates them), and
# the one membership between them: (member, group), an operator can do what a reader can.
# scrinalia_monitor (what monitoring/queries.yaml calls, nothing else) came later: a
# cluster set up by an earlier release may lack it, and migrate then says so, not fails.
GROUPS = ("scrinalia_reader", "scrinalia_operator", "scrinalia_runner", "scrinalia_scheduler", "scrinalia_monitor")
OPTIONAL_GROUPS = ("scrinalia_monitor",)
MEMBERSHIPS = (("scrinalia_operator", "scrinalia_reader"),)
_FIX = "run `scrinalia-workers migrate`"


def _mismatch(head: str | None, expected: str) -> str:
    """Why a database whose schema_head() answers `head` is not this release's, and what
    to do: an older schema is migrated forward; a newer one is not this release's to
    touch; no head at all is code removed by a rollback (or never installed)."""
    if head is None:
        return (
            f"the database has no scrinalia code installed (rolled back, or never migrated); this "
            f"scrinalia-workers {__version__} needs schema {expected}: run `scrinalia-workers migrate` of "
            "the release you mean to run"
        )
    if head in migration_ids():
        return f"database schema is at {head}, this scrinalia-workers {__version__} needs {expected}: {_FIX}"
    return (
        f"database schema is at {printable(head[:80])}, newer than this scrinalia-workers {__version__} "
        f"knows (its head is {expected}): this release is older than the database; run the release that "
        "migrated it, or roll the database back with that release first (docs/operate.md, Downgrading)"
    )


def check_schema(conn: psycopg.Connection) -> str:
    """Returns the head, or raises SchemaMismatch with a one-line message."""
    expected = expected_head()
    try:
        with conn.transaction():
            head = one(conn.execute(SCHEMA_HEAD))[0]
    except psycopg.errors.UndefinedFunction:
        head = None
    except psycopg.errors.InvalidSchemaName:
        raise SchemaMismatch(
            f"the database has no scrinalia schema, this scrinalia-workers needs {expected}: {_FIX}"
        ) from None
    except psycopg.errors.InsufficientPrivilege as e:
        raise SchemaMismatch(
            f"cannot read the schema head ({e.diag.message_primary}): grant this login a scrinalia_* role"
        ) from None
    if head != expected:
        raise SchemaMismatch(_mismatch(head, expected))
    cols = {r[0] for r in conn.execute(RUN_COLUMNS)}
    missing = [c for c in REQUIRED_COLUMNS if c not in cols]
    if missing:
        raise SchemaMismatch(
            f"database schema is at {head} but archive_worker_runs lacks "
            f"{', '.join(missing)}; this scrinalia-workers needs {expected}: {_FIX}"
        )
    has_enum = one(conn.execute(HAS_SCHEDULE_TRIGGER))[0]
    if not has_enum:
        raise SchemaMismatch(
            f"database schema is at {head} but run_trigger lacks SCHEDULE; "
            f"this scrinalia-workers needs {expected}: {_FIX}"
        )
    return head


# What a call fails with when the code or the tables it needs are not there (any more):
# undefined function, column, table, schema.
SCHEMA_MOVED = ("42883", "42703", "42P01", "3F000")


def schema_moved(conn: psycopg.Connection, e: BaseException) -> SchemaMismatch | None:
    """For a daemon whose call failed with `e`: the SchemaMismatch to exit 2 with when the
    database is no longer at this release's head (rolled back, or migrated by another
    release under it), else None (`e` is the daemon's to handle as before)."""
    if getattr(e, "sqlstate", None) not in SCHEMA_MOVED:
        return None
    try:
        check_schema(conn)
    except SchemaMismatch as mismatch:
        return mismatch
    return None


def group_problems(conn: psycopg.Connection) -> list[tuple[str, str]]:
    """(role, problem) for each scrinalia group that exists but is not what it must be."""
    params = {"groups": list(GROUPS), "memberships": [f"{m}>{g}" for m, g in MEMBERSHIPS]}
    return [(r[0], r[1]) for r in conn.execute(GROUP_PROBLEMS, params)]


def refuse_unsound_groups(conn: psycopg.Connection) -> None:
    """ConfigError naming every group that is not what it must be: nothing may go on
    trusting a group somebody created (or altered) with more than the group's rights."""
    problems = group_problems(conn)
    if not problems:
        return
    by_role: dict[str, list[str]] = {}
    for role, problem in problems:
        by_role.setdefault(role, []).append(problem)
    named = "; ".join(f"role {printable(r)} has {', '.join(printable(p) for p in ps)}" for r, ps in by_role.items())
    raise ConfigError(
        f"refusing to trust the scrinalia groups: {named}. A scrinalia group must be NOLOGIN, without "
        "SUPERUSER, CREATEROLE, CREATEDB, REPLICATION or BYPASSRLS, a member of no other role, and "
        "administered only by a superuser or a CREATEROLE login; inspect it (it may have been planted), "
        "then ALTER ROLE / REVOKE it back or drop it; nothing was changed"
    )


def check_privileges(conn: psycopg.Connection, functions: tuple[str, ...], job: str, groups: tuple[str, ...]) -> None:
    """MissingPrivilege naming what this login lacks to `job`: USAGE on the schema, or
    EXECUTE on one of `functions` (exact signatures, scrinalia's own types unqualified,
    e.g. "finish(bigint, uuid, run_status, text, text)"), and the group(s) that grant
    it. Reads only the catalogs, readable by any login, so it speaks even to a login
    in no group. A function that does not exist means the database's SQL code is older
    than this package (a release can add functions without a migration): SchemaMismatch."""
    cur = conn.cursor(row_factory=dict_row)
    row = one(cur.execute(PRIVILEGES, {"groups": list(groups), "functions": list(functions)}))
    if not row["has_schema"]:
        return
    if row["missing"]:
        check_schema(conn)  # a schema of another release says so, and what to do, first
        raise SchemaMismatch(
            f"the database's scrinalia SQL code lacks {', '.join(row['missing'][:3])}"
            f"{' and more' if len(row['missing']) > 3 else ''}: it is older than this "
            f"scrinalia-workers: {_FIX}"
        )
    lacks = ([] if row["usage"] else ["USAGE on schema scrinalia"]) + [f"EXECUTE on {f}" for f in row["denied"]]
    if not lacks:
        return
    login = printable(row["login"])
    shown = ", ".join(lacks[:3]) + (f" and {len(lacks) - 3} more" if len(lacks) > 3 else "")
    if row["member"]:
        raise MissingPrivilege(
            f"login {login} is in {' or '.join(groups)} but lacks {shown}: the group's "
            "grants are incomplete (sql/90_roles.sql; run `scrinalia-workers migrate`)"
        )
    raise MissingPrivilege(
        f"login {login} cannot {job}: it is not in {' or '.join(groups)} and lacks "
        f"{shown}: GRANT {groups[0]} TO {login}"
    )


# --wait-for-database: at most a year (a finite number of seconds)
STARTUP_WAIT_MAX = 366 * 86400.0


def startup_wait(log: EventLog, limit: float | None) -> StartupWait | None:
    """The daemons' wait for their database at start-up, reported on their log; None
    when told not to wait (0)."""
    if limit == 0:
        return None

    def say(reason: str, attempts: int, waited: float) -> None:
        log("waiting for the database", level="warning", reason=reason, attempts=attempts, waited=round(waited))

    return StartupWait(say, limit)


def preflight(
    dsn: str | None,
    application_name: str,
    *,
    functions: tuple[str, ...] = (),
    job: str = "",
    groups: tuple[str, ...] = (),
    server_keepalives: bool = False,
    wait: StartupWait | None = None,
) -> str:
    """The start-up of a daemon: a configured DSN that reaches a schema at the head, and
    (given `functions`) a login allowed to call every one of them. Anything wrong here
    is misconfiguration: ConfigError, one line, exit 2. A server not reachable yet (or
    going away during the check) is waited for through `wait`, when given: only a
    refusal no wait can mend (authentication, no such database or role, no CONNECT,
    a malformed DSN) ends the start-up at once."""
    dsn = db.require_dsn(dsn)
    while True:
        try:
            # connect as the daemon will (a pooler may refuse the keepalive options)
            with db.connect(
                dsn,
                application_name=application_name,
                server_keepalives=server_keepalives,
                connect_timeout=db.CONNECT_TIMEOUT if wait is None else wait.attempt_timeout(),
            ) as conn:
                if functions:
                    check_privileges(conn, functions, job, groups)
                check_schema(conn)
                refuse_unsound_groups(conn)
            return dsn
        except DatabaseUnavailable as e:
            reason = one_line(e) or "cannot connect to the database"
        except psycopg.OperationalError as e:  # the server went away during the check
            reason = f"the database closed the connection during the start-up check: {one_line(e)}"
        if wait is None or is_permanent_connect_failure(reason) or not wait.again(reason):
            raise ConfigError(reason) from None
