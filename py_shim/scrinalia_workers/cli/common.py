"""What every command shares: the program's name and exit codes, its connection, who
acts, the JSON options it parses, and the one-row reads of the SQL API."""

from __future__ import annotations

import argparse
import getpass
import json
import socket
from typing import Any, TypeVar

import psycopg

from scrinalia_workers import errors
from scrinalia_workers.errors import UsageError
from scrinalia_workers.gateway.connection import connect, one, require_dsn
from scrinalia_workers.gateway.statements import cli as sql
from scrinalia_workers.policy import MAX_ACTOR_LENGTH

PROG = "scrinalia-workers"

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_SLOT_BUSY = 3

T = TypeVar("T")


def parse_json_object(text: str, option: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(f"{option} is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    if not isinstance(value, dict):
        raise UsageError(f"{option} must be a JSON object, got {type(value).__name__}")
    return value


def who() -> str:
    """Who the ledger records for a CLI action: the OS user and host."""
    try:
        user = getpass.getuser()
    except Exception:  # no login name in some containers
        user = "unknown"
    return f"cli:{user}@{socket.gethostname()}"[:MAX_ACTOR_LENGTH]


def open_db(args: argparse.Namespace) -> psycopg.Connection[Any]:
    dsn = require_dsn(args.dsn)
    try:
        return connect(dsn, application_name=f"{PROG} {args.command}")
    except psycopg.ProgrammingError as e:  # a malformed connection string (redacted by fail())
        raise errors.ConfigError(f"invalid connection string: {e}") from None


def max_attempts(conn: psycopg.Connection[Any]) -> int:
    (most,) = one(conn.execute(sql.MAX_ATTEMPTS))
    return int(most)
