"""web: the web view (scrinalia_workers.web), after its start-up checks.

Misconfiguration is one line and exit 2: a bad --bind, an address beyond the loopback
without --public, the web view missing from this installation, no database or one it
cannot use. What the login cannot do is said once here, and on every page.
"""

from __future__ import annotations

import argparse

from scrinalia_workers import errors
from scrinalia_workers.cli.common import PROG
from scrinalia_workers.errors import UsageError
from scrinalia_workers.gateway.checks import check_schema
from scrinalia_workers.gateway.connection import connect, require_dsn
from scrinalia_workers.logs import EventLog


def cmd_web(args: argparse.Namespace) -> int:
    try:
        from scrinalia_workers import web
        from scrinalia_workers.web.access import who_is
        from scrinalia_workers.web.actions import Actions
        from scrinalia_workers.web.bind import LOOPBACK_NAMES, parse_bind, refuse_exposure
        from scrinalia_workers.web.server import Settings
    except ImportError as e:
        raise UsageError(f"this installation lacks the web view ({e}): pip install 'scrinalia-workers[web]'") from None

    bind = parse_bind(args.bind)
    exposed = refuse_exposure(bind, args.public)
    try:
        dsn = require_dsn(args.dsn)
        with connect(dsn, application_name=f"{PROG} web") as conn:
            check_schema(conn)
            login = who_is(conn)
    except (errors.ConfigError, errors.DatabaseUnavailable) as e:
        raise UsageError(str(e)) from None

    notes = [exposed] if exposed else []
    if args.allow_actions and not login.can_operate:
        notes.append(f"--allow-actions: this login ({login.kind}) may not act, so no action is offered")
    elif login.superuser:
        notes.append("this login is a superuser: a login in scrinalia_reader is all the view needs")
    elif login.can_operate and not args.allow_actions:
        notes.append(f"this login ({login.kind}) may write, but the view writes nothing without --allow-actions")
    if not login.groups:
        notes.append(f"this login ({login.kind}) can read nothing: grant scrinalia_reader")
    settings = Settings(
        dsn=dsn,
        allowed_hosts=frozenset({*LOOPBACK_NAMES, bind.host.lower(), *(h.lower() for h in args.allow_host)}),
        actions=Actions.new(rerun=login.can_rerun) if args.allow_actions else None,
        page_size=args.page_size,
        request_timeout=args.request_timeout,
    )
    return web.serve(bind, settings, EventLog(json_lines=args.json, level=args.log_level), notes)
