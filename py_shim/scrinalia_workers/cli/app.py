"""scrinalia-workers: the operator's command line over the SQL API.

Every command is a thin call of a stored function or a read of a view
(docs/sql-api.md); the database decides and validates. Errors are one line on
stderr, "scrinalia-workers: error: [SQLSTATE] message", never a traceback.
Exit codes: 0 done, 1 error, 2 bad usage, 3 the worker's slot is busy (SW010).

main() parses (cli/parser.py), dispatches to the command (cli/commands/) and turns
what it raises into that one line and an exit code.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

import psycopg

from scrinalia_workers import errors
from scrinalia_workers.cli.common import EXIT_ERROR, EXIT_OK, EXIT_SLOT_BUSY, EXIT_USAGE, PROG
from scrinalia_workers.cli.parser import build_parser
from scrinalia_workers.cli.terminal import TerminalGuard
from scrinalia_workers.errors import UsageError
from scrinalia_workers.gateway.redact import redact

__all__ = ["build_parser", "fail", "main"]  # build_parser: tests/admin build the tree from here

# PostgreSQL's own errors that mean "not set up", with what to do about them.
SETUP_HINTS = {
    "3F000": "the database is not migrated: run scrinalia-workers migrate as the database owner",
    "42P01": "the database is not migrated (or is an old release): run scrinalia-workers migrate as the database owner",
    "42883": "the database is not migrated (or is an old release): run scrinalia-workers migrate as the database owner",
    "42501": "this login lacks the group the command needs (docs/sql-api.md, Roles)",
}
# the catalogue is written by the owner only (every group reads it)
CATALOGUE_HINT = "the worker catalogue is written by the owner: run it as the login that migrates"


def _db_error_line(e: psycopg.Error, command: str | None) -> str:
    diag = e.diag
    msg = diag.message_primary or str(e)
    line = f"[{e.sqlstate}] {msg}" if e.sqlstate else msg
    hint = diag.message_hint or (
        CATALOGUE_HINT
        if e.sqlstate == "42501" and command in ("worker", "demo", "demo-seed")
        else SETUP_HINTS.get(e.sqlstate or "")
    )
    if hint:
        line += f" (hint: {hint})"
    for note in getattr(e, "__notes__", ()):
        line = f"{note}: {line}"
    return line


def _given_dsns(argv: Sequence[str]) -> list[str]:
    """Every --dsn value on the command line, parsed or not, for redact()."""
    found = []
    for i, a in enumerate(argv):
        if a == "--dsn" and i + 1 < len(argv):
            found.append(argv[i + 1])
        elif a.startswith("--dsn="):
            found.append(a[len("--dsn=") :])
    return found


def fail(message: str, code: int = EXIT_ERROR, dsns: Sequence[str] = ()) -> int:
    text = redact(" ".join(str(message).split()), *dsns)
    print(f"{PROG}: error: {text}", file=sys.stderr)
    return code


def _delegate(name: str, argv: list[str]) -> int:
    """`scrinalia-workers scheduler|runner ...`: the daemon's own main, with its own options."""
    if name == "scheduler":
        from scrinalia_workers.scheduler import main as target
    else:
        from scrinalia_workers.runner import main as target
    return target(argv) or 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("scheduler", "runner"):
        return _delegate(argv[0], argv[1:])
    stdout, stderr = sys.stdout, sys.stderr
    guarded = sys.stdout, sys.stderr = TerminalGuard(stdout), TerminalGuard(stderr)
    try:
        return _main(argv)
    finally:  # as they were, unless a broken pipe put stdout aside
        if sys.stdout is guarded[0]:
            sys.stdout = stdout
        sys.stderr = stderr


def _main(argv: list[str]) -> int:
    dsns = _given_dsns(argv)
    command = None
    try:
        args = build_parser().parse_args(argv)
        command = args.command
        code: int = args.func(args)
        return code
    except UsageError as e:
        return fail(str(e), EXIT_USAGE, dsns)
    except psycopg.Error as e:
        code = EXIT_SLOT_BUSY if e.sqlstate == errors.SLOT_BUSY else EXIT_ERROR
        return fail(_db_error_line(e, command), code, dsns)
    except errors.ScrinaliaError as e:
        sqlstate = getattr(e, "sqlstate", None)
        return fail(f"[{sqlstate}] {e}" if sqlstate else str(e), EXIT_ERROR, dsns)
    except ImportError as e:
        return fail(f"this installation lacks a part: {e}", EXIT_ERROR, dsns)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `scrinalia-workers runs | head`
        try:
            sys.stdout = open(os.devnull, "w")  # no second error when Python flushes at exit
        except OSError:
            pass
        return EXIT_OK
    except Exception as e:  # a bug of ours: still one line, with what to report
        return fail(f"unexpected {type(e).__name__}: {e} (please report it)", EXIT_ERROR, dsns)
