"""Passwords never reach a terminal or a log: scrub them from any text we print.

libpq and psycopg quote the connection string in some errors (a malformed one
especially), and a DSN may be echoed by our own messages: every line the CLI prints
on error goes through redact() with the DSNs it was given.

A well-formed DSN's password is known exactly (libpq parses it) and replaced. A
malformed one cannot be parsed, so nobody knows where its password ends: then what
the message quotes from it, and every run of three or more characters the message
shares with it, is cut out. libpq's own words ("unexpected spaces found in") remain.
PGPASSWORD and the passwords of the passfile are replaced wherever they appear.
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


ECHO = "\N{HORIZONTAL ELLIPSIS}"
MIN_ECHO = 3  # a shorter run is as likely libpq's own word as a piece of the DSN


def _parses(dsn: str) -> bool:
    try:
        psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:
        return False
    return True


def cut_echoes(text: str, source: str) -> str:
    """`text` without what it quotes from `source`, nor any run of MIN_ECHO or more
    characters that also stands in `source`."""
    text = re.sub(r'"([^"]+)"', lambda m: f'"{ECHO}"' if m.group(1) in source else m.group(0), text)
    out: list[str] = []
    i = 0
    while i < len(text):
        n = 0
        while i + n < len(text) and text[i : i + n + 1] in source:
            n += 1
        if n >= MIN_ECHO:
            if not out or out[-1] != ECHO:
                out.append(ECHO)
            i += n
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _passfile_passwords() -> set[str]:
    """The passwords of the libpq passfile (PGPASSFILE or ~/.pgpass), when readable."""
    path = os.environ.get("PGPASSFILE") or os.path.join(os.path.expanduser("~"), ".pgpass")
    found = set()
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                fields = re.split(r"(?<!\\):", line.rstrip("\n"), maxsplit=4)
                if len(fields) == 5 and not line.startswith("#") and fields[4]:
                    found.add(fields[4].replace("\\:", ":").replace("\\\\", "\\"))
    except OSError:
        pass
    return found


def redact(text: str, *dsns: str | None) -> str:
    given = [d for d in (*dsns, os.environ.get("DATABASE_URL")) if d]
    for d in given:
        if not _parses(d):
            text = cut_echoes(text, d)
    secrets = {p for d in given for p in passwords_in(d)} | _passfile_passwords()
    if os.environ.get("PGPASSWORD"):
        secrets.add(os.environ["PGPASSWORD"])
    for s in sorted(secrets, key=len, reverse=True):
        if len(s) < 3:  # too short to replace blindly; the patterns below still catch it
            continue
        # libpq percent-decodes URIs: the encoded form may be what was typed
        text = text.replace(s, MASK).replace(quote(s, safe=""), MASK)
    text = _URI_PASSWORD.sub(lambda m: f"{m.group('head')}{MASK}@", text)
    return _KW_PASSWORD.sub(lambda m: f"{m.group('head')}{MASK}", text)
