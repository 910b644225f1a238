"""The web view's tests' helpers: HTTP through urllib (no redirect followed, errors
returned as answers), a login's DSN, and the data the fixtures plant."""

from __future__ import annotations

import re
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from email.message import Message
from urllib.parse import urlencode

import psycopg

SERVING = re.compile(r"serving (http://\S+/)")


@dataclass
class Answer:
    status: int
    headers: Message
    body: str


@dataclass
class WebProc:
    proc: subprocess.Popen
    lines: list[str] = field(default_factory=list)
    url: str = ""

    def get(self, path: str, headers: dict[str, str] | None = None) -> Answer:
        return request(self.url.rstrip("/") + path, headers=headers)

    def post(self, fields: dict[str, str], headers: dict[str, str] | None = None) -> Answer:
        origin = self.url.rstrip("/")
        hdrs = {"Origin": origin, "Content-Type": "application/x-www-form-urlencoded", **(headers or {})}
        return request(origin + "/action", urlencode(fields).encode(), {k: v for k, v in hdrs.items() if v})

    def log(self) -> str:
        return "".join(self.lines)


def request(url: str, data: bytes | None = None, headers: dict[str, str] | None = None) -> Answer:
    req = urllib.request.Request(url, data=data, headers=headers or {}, method="POST" if data is not None else "GET")
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            return Answer(r.status, r.headers, r.read().decode())
    except urllib.error.HTTPError as e:
        return Answer(e.code, e.headers, e.read().decode())


def login_dsn(dsn: str, login: str) -> str:
    return psycopg.conninfo.make_conninfo(dsn, user=login)


CHAIN_ERRORS = ("OCR engine crashed: page 3", "OCR engine crashed: page 3 again", "gave up: disk full")


# Text anybody can write through the SQL API: markup, an attribute break-out, an entity,
# a newline and a tab, and every class of character that acts (the terminal's test's).
MARKUP = '<script>alert(1)</script>"\' onmouseover="x" <img src=x onerror=alert(2)> &amp;'
ACTING = "\x1b[31m\x1b]0;owned\x07\r\x9b\x7f\u202e\u2066\u200b\u2028\ufeff\x08"
HOSTILE = "x" + MARKUP + "\nline two\t" + ACTING + "y"
