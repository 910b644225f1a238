"""Passwords never reach a terminal or a log: scrub them from any text we print.

libpq and psycopg quote the connection string in some errors (a malformed one
especially), and a DSN may be echoed by our own messages: every line the CLI prints
on error goes through redact() with the DSNs it was given.
"""

from __future__ import annotations

import os
import re
from urllib.parse import quote

import psycopg

MASK = "***"
# scheme://user:PASSWORD@host  (also with the scheme's colon lost: postgresql//u:p@h)
_URI_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*:?//[^:/?#@\s\"']*:)(?P<pw>[^@\s\"']*)@")
# password=secret, password = 'sec ret'
_KW_PASSWORD = re.compile(r"(?P<head>\bpassword\s*=\s*)(?P<pw>'(?:[^'\\]|\\.)*'|[^\s\"']+)", re.I)


def passwords_in(dsn: str | None) -> list[str]:
    """The password(s) a DSN carries, parsed by libpq or, when it is malformed, guessed."""
    if not dsn:
        return []
    found = []
    try:
        pw = psycopg.conninfo.conninfo_to_dict(dsn).get("password")
        if pw:
            found.append(str(pw))
    except psycopg.Error:
        pass
    for rx in (_URI_PASSWORD, _KW_PASSWORD):
        for m in rx.finditer(dsn):
            pw = m.group("pw").strip("'")
            if pw:
                found.append(pw)
    return found


def redact(text: str, *dsns: str | None) -> str:
    secrets = {p for d in (*dsns, os.environ.get("DATABASE_URL")) for p in passwords_in(d)}
    if os.environ.get("PGPASSWORD"):
        secrets.add(os.environ["PGPASSWORD"])
    for s in sorted(secrets, key=len, reverse=True):
        if len(s) < 3:  # too short to replace blindly; the patterns below still catch it
            continue
        # libpq percent-decodes URIs: the encoded form may be what was typed
        text = text.replace(s, MASK).replace(quote(s, safe=""), MASK)
    text = _URI_PASSWORD.sub(lambda m: f"{m.group('head')}{MASK}@", text)
    return _KW_PASSWORD.sub(lambda m: f"{m.group('head')}{MASK}", text)
