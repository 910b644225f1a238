"""migrate and groups: the owner's and the cluster administrator's set-up steps."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from scrinalia_workers import __version__
from scrinalia_workers.cli.common import EXIT_OK, PROG, one
from scrinalia_workers.cli.fmt import print_json
from scrinalia_workers.errors import ConfigError, UsageError
from scrinalia_workers.gateway.connection import connect, require_dsn
from scrinalia_workers.gateway.statements import cli as sql

if TYPE_CHECKING:
    from scrinalia_workers.admin.logins import Done


def cmd_migrate(args: argparse.Namespace) -> int:
    from scrinalia_workers.admin import migrate

    dsn = require_dsn(args.dsn)
    if args.rollback:
        done = migrate.rollback(dsn, args.count, lock_timeout=args.lock_timeout)
        if args.json:
            print_json({"rolled_back": done})
        elif done:
            for mid in done:
                print(f"rolled back {mid}")
        else:
            print("nothing to roll back")
        return EXIT_OK
    if args.count is not None:
        raise UsageError("--count goes with --rollback")
    applied = migrate.migrate(dsn, create_groups=args.create_groups, lock_timeout=args.lock_timeout)
    with connect(dsn, application_name=f"{PROG} migrate") as conn:
        (head,) = one(conn.execute(sql.SCHEMA_HEAD))
    if args.json:
        print_json({"applied": applied, "schema_head": head})
        return EXIT_OK
    for mid in applied:
        print(f"applied {mid}")
    if not applied:
        print(f"already at the head ({head}): no migration to apply")
    print(f"re-installed the SQL code (functions, views, grants) of scrinalia-workers {__version__}")
    return EXIT_OK


def _login_state(d: Done) -> str:
    if d.created:
        return "created"
    return "existing, password reset" if d.password_set else "existing, password kept"


def cmd_groups(args: argparse.Namespace) -> int:
    from scrinalia_workers.admin import groups

    if args.action == "sql":
        print(groups.groups_sql(), end="")
        return EXIT_OK
    if args.action == "logins":
        from scrinalia_workers.admin import logins

        try:
            made = logins.create_at(require_dsn(args.dsn), reset_password=args.reset_password)
        except ConfigError as e:  # a login refused, a setting missing: the operator's to fix, exit 2
            raise UsageError(str(e)) from None
        if args.json:
            print_json(
                {
                    "logins": [d.login for d in made],
                    "created": [d.login for d in made if d.created],
                    "password_set": [d.login for d in made if d.password_set],
                }
            )
        else:
            print("logins ready: " + ", ".join(f"{d.login} ({_login_state(d)})" for d in made))
        return EXIT_OK
    done = groups.create_at(require_dsn(args.dsn))
    if args.json:
        print_json({"created": done})
    else:
        print(f"created {', '.join(done)}" if done else "the groups are already set up: nothing to do")
    return EXIT_OK
